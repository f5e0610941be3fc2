import sys

from attnrepro.cli import main

sys.exit(main())
