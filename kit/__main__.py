"""`python -m kit <verb>`: see kit/cli.py."""

import sys

from kit.cli import main

sys.exit(main())
