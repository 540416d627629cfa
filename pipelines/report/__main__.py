"""``python -m pipelines.report RUN``."""

import sys

from pipelines.report.write import main

sys.exit(main())
