import sys

from mucutlass.cli import main

sys.exit(main())
