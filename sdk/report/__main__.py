"""`python -m sdk.report TRACES [--out FOLDER]`: the `kvwise report` command."""

import sys

from sdk.report.cli import main

sys.exit(main(["report", *sys.argv[1:]]))
