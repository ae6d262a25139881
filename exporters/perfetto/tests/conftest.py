# SPDX-License-Identifier: Apache-2.0
"""Makes ``pftrace_testlib`` (span builders, the independent trace decoder) importable.

pytest runs with ``--import-mode=importlib``, which does not put test folders on
``sys.path``; this folder is added so test modules can share that library.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
