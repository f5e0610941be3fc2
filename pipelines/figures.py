"""`attnrepro figures` as a script: python pipelines/figures.py [figures=xor_phase_dm] [outputs=DIR]"""

import sys

from attnrepro.cli import main

sys.exit(main(["figures", *sys.argv[1:]]))
