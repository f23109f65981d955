"""`python -m repository.cli`: the same as the `provrepo` console script."""

import sys

from ._main import main

sys.exit(main())
