from __future__ import annotations

import sys

from course.cli import main

sys.exit(main())
