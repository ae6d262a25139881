# SPDX-License-Identifier: Apache-2.0
"""What brickscope needs from the OTel metrics SDK beyond its public API, in one place.

The public API takes a histogram one value per ``record()`` call (about 5 us each in
SDK 1.45: attribute hashing, the measurement object, the exemplar filter and
reservoir, the bucket search under a lock). brickscope aggregates its duration
histogram itself (``_totals.DurationHistogram``) and, once per collection, records one
value per (labels, bucket) through the public API, so views, exemplars and
aggregation creation stay the SDK's, then adds the bucket's other values to the
aggregations that record reached (:func:`add_to_points`).

That is only exact when every aggregation the instrument feeds is an explicit-bucket
histogram with brickscope's boundaries and no attribute filter (the default view, or a
view that changes nothing that matters here): :func:`can_add_points` checks it, and
anything else (a View with other buckets or an exponential histogram, an attribute
filter, another SDK version's layout) keeps one ``record()`` per value.

Example::

    if can_add_points(meter_provider, histogram, bounds):
        histogram.record(last_value, labels)          # the public path, once
        add_to_points(meter_provider, histogram, labels, extra_counts, extra_sum, lo, hi)
"""

from __future__ import annotations

import logging
from typing import Any, Sequence

logger = logging.getLogger(__name__)

from opentelemetry.sdk.version import __version__ as _SDK_VERSION

#: SDK releases whose internals this module was read against and tested with
#: (tests/unit/test_duration_histogram.py). Another release may keep the private names
#: and change what they mean, so it records one value per call until checked and added.
CHECKED_SDK_RELEASES = ("1.45.",)
CHECKED_SDK = _SDK_VERSION.startswith(CHECKED_SDK_RELEASES)

try:  # SDK 1.45 layout; another one: not eligible, record per value
    from opentelemetry.sdk.metrics import MeterProvider as SdkMeterProvider
    from opentelemetry.sdk.metrics._internal._view_instrument_match import _OVERFLOW_KEY, _hash_attributes
    from opentelemetry.sdk.metrics._internal.aggregation import _ExplicitBucketHistogramAggregation
except ImportError:  # pragma: no cover - exercised only on other SDK versions
    SdkMeterProvider = None  # type: ignore[assignment,misc]


def _matches(meter_provider: Any, instrument: Any) -> list[list[Any]]:
    """The instrument's view matches in every reader storage (created if not yet)."""
    storages = meter_provider._measurement_consumer._reader_storages  # noqa: SLF001
    return [storage._get_or_init_view_instrument_match(instrument) for storage in storages.values()]  # noqa: SLF001


def _eligible(match: Any, bounds: Sequence[float]) -> bool:
    aggregation = match._aggregation  # noqa: SLF001 - the view's aggregation template
    return (
        type(aggregation) is _ExplicitBucketHistogramAggregation
        and tuple(aggregation._boundaries) == tuple(bounds)  # noqa: SLF001
        and match._view._attribute_keys is None  # noqa: SLF001
    )


def can_add_points(meter_provider: Any, instrument: Any, bounds: Sequence[float]) -> bool:
    """Whether pre-aggregated values of ``instrument`` can be added exactly (see the module
    docstring); False on anything unexpected."""
    if not CHECKED_SDK or SdkMeterProvider is None or not isinstance(meter_provider, SdkMeterProvider):
        return False
    try:
        return all(_eligible(match, bounds) for matches in _matches(meter_provider, instrument) for match in matches)
    except Exception:  # another SDK's layout
        logger.debug("brickscope: the metrics SDK's layout is not the one known; histogram values recorded one by one")
        return False


def add_to_points(
    meter_provider: Any,
    instrument: Any,
    labels: dict[str, str],
    counts: Sequence[int],
    sum_s: float,
    min_s: float,
    max_s: float,
) -> bool:
    """Add ``counts`` (one per bucket), their sum, min and max to the points of ``labels``
    that a ``record()`` of the same labels just created or updated, in every reader.
    Returns False (nothing added to that reader) where the layout is not the eligible one."""
    ok = True
    key = _hash_attributes(dict(labels))
    for matches in _matches(meter_provider, instrument):
        for match in matches:
            if type(match._aggregation) is not _ExplicitBucketHistogramAggregation:  # noqa: SLF001
                ok = False
                continue
            points = match._attributes_aggregation  # noqa: SLF001
            aggregation = points.get(key) or points.get(_OVERFLOW_KEY)
            if aggregation is None or len(aggregation._boundaries) + 1 != len(counts):  # noqa: SLF001
                ok = False
                continue
            with aggregation._lock:  # noqa: SLF001
                if aggregation._value is None:  # noqa: SLF001 - collected meanwhile (delta): a fresh period
                    aggregation._value = aggregation._get_empty_bucket_counts()  # noqa: SLF001
                value = aggregation._value  # noqa: SLF001
                for index, count in enumerate(counts):
                    value[index] += count
                aggregation._sum += sum_s  # noqa: SLF001
                if aggregation._record_min_max:  # noqa: SLF001
                    aggregation._min = min(aggregation._min, min_s)  # noqa: SLF001
                    aggregation._max = max(aggregation._max, max_s)  # noqa: SLF001
    return ok
