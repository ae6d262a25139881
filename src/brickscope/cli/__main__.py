# SPDX-License-Identifier: Apache-2.0
"""``python -m brickscope.cli``: the ``brickscope`` command."""

import sys

from brickscope.cli import main

sys.exit(main())
