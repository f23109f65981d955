"""The `provrepo` command line (console script `repository.cli:main`), above the storage core:
it uses only the public `repository` facade."""

from ._args import Subparsers
from ._main import CliError, build_parser, main
from ._output import Output

__all__ = ["CliError", "Output", "Subparsers", "build_parser", "main"]
