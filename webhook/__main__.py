"""`python -m webhook` runs the `allot` CLI."""

import sys

from webhook.cli import main

sys.exit(main())
