# SPDX-License-Identifier: Apache-2.0
"""Attribute keys that brickscope puts on spans, resources and metrics.

Every key brickscope writes is a constant here; ``docs/semantic-conventions.md``
is the table of name, type, unit and meaning. OpenTelemetry semantic-convention
names are reused where one exists (``thread.id``, ``exception.*``); the rest live
under ``brickscope.``. Times are integers in nanoseconds since the Unix epoch,
durations are integers in nanoseconds: the key says so with ``_ns``.

Example::

    from brickscope.trace import attributes as A
    gpu_ns = span.attributes.get(A.GPU_DURATION_NS)
"""

# --- what kind of scope a span is ------------------------------------------------

#: str: ``"step"``, ``"layer"``, ``"brick"``, ``"kernel"``, ``"overhead"`` or ``"gc"``.
#: On every brickscope span.
SCOPE_KIND = "brickscope.scope.kind"
SCOPE_KIND_STEP = "step"
SCOPE_KIND_LAYER = "layer"
SCOPE_KIND_BRICK = "brick"
SCOPE_KIND_KERNEL = "kernel"
#: brickscope's own work on the application thread (resolving scopes into spans, and what
#: the provider's processors do with them there): one span per sync point that resolved
#: something, named :data:`OVERHEAD_SPAN_NAME`, a child of the span it ran in. Analysis
#: leaves it out of every enclosing span's self time.
SCOPE_KIND_OVERHEAD = "overhead"
#: A Python garbage-collection pause (``gc.callbacks``) on a thread inside an open, sampled
#: scope: a span named :data:`GC_SPAN_NAME`, a child of that scope. It is the enclosing
#: code's time (its allocations caused it) and stays in that code's self time.
SCOPE_KIND_GC = "gc"
OVERHEAD_SPAN_NAME = "brickscope.resolve"
GC_SPAN_NAME = "gc"

#: str: the brick's name (also the span name). On brick and kernel spans (a
#: kernel carries the name of the brick that encloses it, if any).
BRICK_NAME = "brickscope.brick.name"
#: str: the brick's category (norm, attention, ffn, ...). On brick and kernel spans.
BRICK_CATEGORY = "brickscope.brick.category"
#: int: elements the brick processed (tokens, rows...), for throughput. Brick spans, when > 0.
BRICK_ELEMENTS = "brickscope.brick.elements"
#: int: the brick's self time, ns: its duration (on its clock) minus the durations of
#: bricks nested inside it, however deep and through whatever spans, clamped at 0.
#: On brick spans. This is what CategoryAggregator sums, so nothing is counted twice.
BRICK_SELF_DURATION_NS = "brickscope.brick.self_duration_ns"
#: int: the layer index. On layer spans, and on every scope nested in a layer.
LAYER_INDEX = "brickscope.layer.index"
#: int: the step number. On step spans, and on every scope nested in a step.
STEP_NUMBER = "brickscope.step.number"

# --- brickscope's own work and host pauses (overhead and gc spans) -------------------

#: int: spans a sync point resolved and handed to the processors. On overhead spans.
OVERHEAD_SPANS = "brickscope.overhead.spans"
#: int: the collected generation (0, 1 or 2). On gc spans.
GC_GENERATION = "brickscope.gc.generation"
#: int: objects the collection freed. On gc spans.
GC_COLLECTED = "brickscope.gc.collected"

# --- work done, for throughput, memory and roofline analysis (optional) -----------

#: int: bytes the scope moved to and from memory (reads plus writes), for GB/s and
#: arithmetic intensity. Brick and kernel spans, when given: ``bs.brick("gemm", bytes=n)``.
WORK_BYTES = "brickscope.work.bytes"
#: int or float: floating-point operations the scope performed, for FLOP/s and the roofline.
#: Brick and kernel spans, when given: ``bs.brick("gemm", flops=2 * m * n * k)``.
WORK_FLOPS = "brickscope.work.flops"
#: int[]: shape of the scope's output tensor; with :data:`WORK_DTYPE` it gives the
#: output's size in bytes when :data:`WORK_BYTES` is absent. ``output_shape=(b, n)``.
WORK_OUTPUT_SHAPE = "brickscope.work.output_shape"
#: str: element type of that output (``float32``, ``bfloat16``, ``int8``...). ``dtype="bfloat16"``.
WORK_DTYPE = "brickscope.work.dtype"
#: int: CPU time the step's thread spent from the step's start to its end, ns
#: (``time.thread_time_ns``): against the step's host duration, how much of the step
#: its thread ran (the rest it waited: the GIL, I/O, the GPU, the OS scheduler). On the
#: step spans of sampled outermost steps that ended on the thread that opened them, when
#: host intervals are on.
STEP_THREAD_CPU_NS = "brickscope.step.thread_cpu_ns"
#: int: tokens the step produced or consumed, for tokens/s. Step spans: ``bs.step(n, tokens=k)``.
STEP_TOKENS = "brickscope.step.tokens"
#: The short keyword each of the above may be given as: a scope's extra keyword arguments
#: become span attributes as they are (``bs.brick("gemm", bytes=n)`` puts ``bytes`` on the
#: span); brickscope's analysis reads the full name, else the short one.
SCOPE_KEYWORDS = {
    "bytes": WORK_BYTES,
    "flops": WORK_FLOPS,
    "output_shape": WORK_OUTPUT_SHAPE,
    "dtype": WORK_DTYPE,
    "tokens": STEP_TOKENS,
}

# --- kernel launch configuration ---------------------------------------------------

#: str: the kernel's name (also the span name). On kernel spans.
KERNEL_NAME = "brickscope.kernel.name"
#: int[3]: grid dimensions (x, y, z). On kernel spans, when given.
KERNEL_GRID = "brickscope.kernel.grid"
#: int[3]: block dimensions (x, y, z). On kernel spans, when given.
KERNEL_BLOCK = "brickscope.kernel.block"
#: int: dynamic shared memory per block, bytes. On kernel spans, when given.
KERNEL_SHARED_MEM_BYTES = "brickscope.kernel.shared_mem_bytes"

#: str: 64-bit hash (16 hex digits) of the kernel's registered source
#: (``brickscope.register_kernel_source``). On kernel spans of a registered name.
KERNEL_SOURCE_HASH = "brickscope.kernel.source.hash"
#: str: the kernel source registry, JSON ``{"<hash>": ["<kind>", "<name>", "<path>"]}``
#: (path ``""`` when not given): one string survives every transport. Resource attribute.
KERNEL_SOURCES = "brickscope.kernel.sources"

# --- tiles of cache-blocked CPU/SIMD kernels (bs.tile) ------------------------------

#: The tile levels, outermost first.
TILE_LEVELS = ("macro", "midi", "micro")
#: int: tiles of level ``<level>`` run inside the scope (directly, not in a nested scope).
#: ``brickscope.tile.macro.count`` etc. On the enclosing scope's span.
TILE_COUNT = "brickscope.tile.{}.count"
#: int: their summed host-clock durations, ns.
TILE_DURATION_NS = "brickscope.tile.{}.duration_ns"
#: int: their summed elements.
TILE_ELEMENTS = "brickscope.tile.{}.elements"

# --- output checksums (opt-in) ----------------------------------------------------

#: str: lane-parallel FNV-1a 64 of the output bytes given to ``bs.checksum`` (16 hex
#: digits; several calls in one scope fold into one), for divergence checks. On the
#: innermost open scope of the call, when sampled (docs/analysis.md, divergence).
OUTPUT_CHECKSUM = "brickscope.output.checksum"
#: int: bytes the checksum covered (summed over the scope's ``bs.checksum`` calls).
OUTPUT_CHECKSUM_BYTES = "brickscope.output.checksum_bytes"

# --- clocks and timing -----------------------------------------------------------

#: str: the clock that timed the span's own start and end: ``"host"``, ``"cuda"`` or ``"gpu"``.
CLOCK = "brickscope.clock"
CLOCK_HOST = "host"
CLOCK_CUDA = "cuda"
#: A GPU clock brickscope did not read itself: an interval measured elsewhere (Vulkan or
#: Metal timestamp queries, a vendor tool) and given with ``bs.record_gpu``.
CLOCK_GPU = "gpu"
#: The clocks of GPU-timed spans (drawn on GPU stream tracks, analysed as GPU work).
GPU_CLOCKS = frozenset((CLOCK_CUDA, CLOCK_GPU))

#: int: host-clock start of the scope, ns since the Unix epoch. On every span.
#: For host-timed spans it equals the span's start time; for GPU-timed spans the
#: span's start is the GPU start and this keeps the host (launch-side) interval.
HOST_START_NS = "brickscope.host.start_ns"
#: int: host-clock duration of the scope, ns. On every span.
HOST_DURATION_NS = "brickscope.host.duration_ns"

#: int: measured GPU duration, ns (CUDA event elapsed time, 0.5 us resolution).
#: On GPU-timed spans; equals ``end_time - start_time`` of such a span.
GPU_DURATION_NS = "brickscope.gpu.duration_ns"
#: int: CUDA device ordinal the scope's stream belongs to. On GPU-timed spans.
GPU_DEVICE_ID = "brickscope.gpu.device.id"
#: int: the CUDA stream handle the scope was timed on (0 = legacy default stream).
GPU_STREAM_ID = "brickscope.gpu.stream.id"
#: str: why GPU timing was wanted but is missing on this span: a CUDA error name
#: (``"CUDA_ERROR_LAUNCH_FAILED"``...), ``"mark_failed"`` (an event could not be recorded)
#: or ``"unresolved_at_shutdown"``. The span is then host-timed (``brickscope.clock = "host"``).
GPU_TIMING_ERROR = "brickscope.gpu.timing_error"
#: str: why this span has no GPU timing by design (not an error): ``"cuda_graph_capture"``
#: for a brick opened while its stream was capturing a CUDA graph (brickscope.torch).
GPU_TIMING_SKIPPED = "brickscope.gpu.timing_skipped"

# --- PyTorch (brickscope.torch) ---------------------------------------------------

#: str: the instrumented module's path in its model (``"layers.3.attn"``; ``""`` for the model).
TORCH_MODULE_PATH = "brickscope.torch.module.path"
#: str: ``"backward"`` on a brick that times a module's backward pass (``instrument(backward=True)``).
TORCH_PASS = "brickscope.torch.pass"

# --- host execution context (OpenTelemetry general semantic conventions) -----------

#: int: the host thread that ran the scope (``threading.get_ident()``).
THREAD_ID = "thread.id"
#: str: that thread's name.
THREAD_NAME = "thread.name"

# --- resource ----------------------------------------------------------------------

#: str[]: names of the CUDA devices brickscope timed on. Resource attribute.
GPU_DEVICE_NAMES = "brickscope.gpu.device.names"
#: str: the machine's host name (OpenTelemetry resource semantic conventions). Resource attribute.
HOST_NAME = "host.name"
#: int: the process's global rank in a distributed job, from the launcher's variables
#: (torchrun ``RANK``, ``OMPI_COMM_WORLD_RANK``, ``PMI_RANK``, ``SLURM_PROCID``...).
#: Resource attribute. OpenTelemetry has no semantic convention for it yet.
RANK = "brickscope.rank"
#: int: the process's rank on its node (torchrun ``LOCAL_RANK``, ``SLURM_LOCALID``...).
#: Resource attribute.
LOCAL_RANK = "brickscope.local_rank"
#: int: number of processes in the job (torchrun ``WORLD_SIZE``, ``SLURM_NTASKS``...).
#: Resource attribute.
WORLD_SIZE = "brickscope.world_size"

# --- metrics (instrument names and their attributes) --------------------------------

#: Histogram, seconds: self time of each brick, by brick and category; which bricks it
#: records is ``configure(duration_histogram=...)``'s choice (default: those with a span).
METRIC_BRICK_DURATION = "brickscope.brick.duration"
#: Observable counter, {element}: elements processed, sampled or not (exact), by brick and category.
METRIC_BRICK_ELEMENTS = "brickscope.brick.elements"
#: Observable counter, {brick}: bricks resolved, sampled or not (exact), by brick and category.
METRIC_BRICK_COUNT = "brickscope.brick.count"
#: Observable counter, seconds: self time summed exactly, sampled or not, by brick and category.
METRIC_BRICK_SELF_TIME = "brickscope.brick.self_time"
