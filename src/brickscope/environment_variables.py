# SPDX-License-Identifier: Apache-2.0
"""Environment variables brickscope reads. Each fills a ``configure()`` argument left unset.

The standard ``OTEL_*`` variables are read by the OpenTelemetry SDK itself.
"""

#: "1"/"true" turns every scope into a no-op (``configure(enabled=False)``).
BRICKSCOPE_DISABLE = "BRICKSCOPE_DISABLE"

#: Sync policy: ``deferred`` (default), ``per_layer``, ``immediate`` or ``none``.
BRICKSCOPE_SYNC_MODE = "BRICKSCOPE_SYNC_MODE"

#: Clock: ``auto`` (default: CUDA events if a driver and device are there, else host),
#: ``cuda`` (fail at configure time without them) or ``host``.
BRICKSCOPE_CLOCK = "BRICKSCOPE_CLOCK"

#: Ended scopes kept before a forced sync (default 16384).
BRICKSCOPE_MAX_PENDING = "BRICKSCOPE_MAX_PENDING"

#: Spans a session keeps for ``session.report()`` (default 262144, about 40 MB); later
#: spans are counted (``session.aggregator.dropped``) and named in the report, not kept.
BRICKSCOPE_REPORT_MAX_SPANS = "BRICKSCOPE_REPORT_MAX_SPANS"

#: Which steps produce spans (``configure(step_sampling=...)``): ``every=N`` or a
#: torch.profiler-like schedule ``wait=W,warmup=U,active=A[,repeat=R][,skip_first=S]``.
#: Metrics count every brick whatever is sampled.
BRICKSCOPE_STEP_SAMPLING = "BRICKSCOPE_STEP_SAMPLING"

#: Where scopes are resolved into spans: ``inline`` (default: at sync points, on the
#: thread reaching them) or ``thread`` (a resolver thread; the app thread only records).
BRICKSCOPE_RESOLVER = "BRICKSCOPE_RESOLVER"

#: Which bricks the ``brickscope.brick.duration`` histogram records
#: (``configure(duration_histogram=...)``): ``sampled`` (default: those with a span),
#: ``all`` (every brick; aggregated by brickscope, ~0.8 us each) or ``off``. Exact count, self time and elements
#: of every brick are counted either way.
BRICKSCOPE_DURATION_HISTOGRAM = "BRICKSCOPE_DURATION_HISTOGRAM"

#: ``false`` turns off the ``overhead`` spans of brickscope's own work on application threads
#: and the ``gc`` spans of garbage-collection pauses inside scopes
#: (``configure(host_intervals=...)``; default true).
BRICKSCOPE_HOST_INTERVALS = "BRICKSCOPE_HOST_INTERVALS"
