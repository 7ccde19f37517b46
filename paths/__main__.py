"""`python -m paths ...` is the `paths` command."""

import sys

from .cli.main import main

sys.exit(main())
