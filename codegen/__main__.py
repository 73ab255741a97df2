import sys

from codegen.cli import main

sys.exit(main())
