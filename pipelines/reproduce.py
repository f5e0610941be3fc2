"""`attnrepro reproduce` as a script: python pipelines/reproduce.py profile=smoke experiments=xor_phase_dm"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))  # before the package is installed

from attnrepro.cli import main  # noqa: E402

sys.exit(main(["reproduce", *sys.argv[1:]]))
