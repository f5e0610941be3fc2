"""`attnrepro theory` as a script: python pipelines/theory.py profile=quick experiments=[tied_error_vs_alpha]"""

import sys

from attnrepro.cli import main

sys.exit(main(["theory", *sys.argv[1:]]))
