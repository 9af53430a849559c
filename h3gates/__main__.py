import sys

from h3gates.cli import main

sys.exit(main())
