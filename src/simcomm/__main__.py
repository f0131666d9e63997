"""`python -m simcomm`: the simcomm command, for environments where the console script is not on PATH."""
import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
