"""`attnrepro train` as a script: python pipelines/train.py -m experiment=xor_phase_dm profile=quick"""

import sys

from attnrepro.cli import main

sys.exit(main(["train", *sys.argv[1:]]))
