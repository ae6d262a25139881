# SPDX-License-Identifier: Apache-2.0
"""Step sampling: which steps produce spans. Metrics see every step whatever is chosen.

A :class:`StepSampling` is a pure function of the step number (``bs.step(n)``), so the
decision needs no state and is the same on every rank. Two policies:

- ``every=N``: steps whose number is a multiple of N (0, N, 2N...);
- a schedule as ``torch.profiler.schedule`` has: skip the first ``skip_first`` steps,
  then cycles of ``wait`` steps, ``warmup`` steps and ``active`` steps, ``repeat``
  cycles (0: forever). Only active steps produce spans. Warmup steps are treated as
  waiting ones (brickscope has no start-up cost to absorb); the field is there so a
  torch.profiler schedule carries over unchanged.

The policy applies to a step that opens as the outermost brickscope scope (under a
request span or none), combined with the OTel sampler's decision: a step produces
spans only when both keep it. Bricks outside any step follow the OTel sampler alone.

Example::

    bs.configure(step_sampling="every=100")
    bs.configure(step_sampling="wait=5,warmup=1,active=3,repeat=2")
    # or BRICKSCOPE_STEP_SAMPLING="every=100"
"""

from __future__ import annotations

from dataclasses import dataclass

_FIELDS = ("every", "wait", "warmup", "active", "repeat", "skip_first")


@dataclass(frozen=True)
class StepSampling:
    """Which step numbers produce spans (see the module docstring).

    Raises:
        ValueError: a negative field, ``every`` combined with schedule fields, or a
            schedule whose cycle has no active step.

    .. versionadded:: 0.2.0
    """

    every: int = 0
    wait: int = 0
    warmup: int = 0
    active: int = 0
    repeat: int = 0
    skip_first: int = 0

    def __post_init__(self) -> None:
        for name in _FIELDS:
            value = getattr(self, name)
            if type(value) is not int or value < 0:
                raise ValueError(f"brickscope: step sampling {name} must be an int >= 0, got {value!r}")
        schedule = (self.wait, self.warmup, self.active, self.repeat, self.skip_first)
        if self.every and any(schedule):
            raise ValueError("brickscope: step sampling takes either every=N or a wait/warmup/active schedule")
        if not self.every and self.active < 1:
            raise ValueError("brickscope: step sampling needs every=N (N >= 1) or active >= 1")

    def samples(self, number: int) -> bool:
        """Whether step ``number`` produces spans."""
        if self.every:
            return number % self.every == 0
        position = number - self.skip_first
        if position < 0:
            return False
        cycle = self.wait + self.warmup + self.active
        if self.repeat and position >= cycle * self.repeat:
            return False
        return position % cycle >= self.wait + self.warmup

    @classmethod
    def parse(cls, text: str) -> StepSampling:
        """``"every=100"`` or ``"wait=5,warmup=1,active=3,repeat=2,skip_first=10"``."""
        fields: dict[str, int] = {}
        for item in text.split(","):
            name, sep, value = item.partition("=")
            name = name.strip()
            if not sep or name not in _FIELDS:
                raise ValueError(
                    f"brickscope: bad step sampling {text!r}; expected every=N or "
                    "wait=W,warmup=U,active=A[,repeat=R][,skip_first=S]"
                )
            try:
                fields[name] = int(value)
            except ValueError:
                raise ValueError(f"brickscope: step sampling {name}={value.strip()!r} is not an int") from None
        return cls(**fields)
