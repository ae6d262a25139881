# SPDX-License-Identifier: Apache-2.0
"""Hypothesis settings for the whole suite: CI replays, developers explore.

With ``CI`` set (CI runs ``.ci/run`` with ``CI=true``) the ``ci`` profile derandomizes:
every run tries the same examples (plus each test's ``@example`` regressions), so a
landing is never blocked by an example nobody has seen. Elsewhere the ``dev`` profile
draws new random examples each run and keeps failures in ``.hypothesis/`` to replay
them; ``--hypothesis-profile`` picks either explicitly. See DEVELOPERS.md.
"""

from __future__ import annotations

import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
settings.register_profile("dev", print_blob=True)
settings.load_profile("ci" if os.environ.get("CI") else "dev")
