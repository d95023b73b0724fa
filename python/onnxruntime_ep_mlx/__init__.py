"""ONNX Runtime plugin execution provider that runs ONNX subgraphs through MLX.

Typical use::

    import onnxruntime as ort
    import onnxruntime_ep_mlx

    so = ort.SessionOptions()
    onnxruntime_ep_mlx.append_to_session_options(so)
    sess = ort.InferenceSession("model.onnx", so)

``append_to_session_options`` registers the plugin library with ONNX Runtime
(once per process) and adds the MLX EP devices to the session options; nodes
the EP does not claim run on the CPU EP, which ONNX Runtime always appends.
"""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path
from typing import Any, Mapping

__version__ = "0.1.0"

__all__ = [
    "append_to_session_options",
    "claim_report",
    "ep_name",
    "get_ep_devices",
    "library_path",
    "register_execution_provider_library",
    "version",
]

_EP_NAME = "MLXExecutionProvider"
_LIBRARY_ENV = "ONNXRUNTIME_EP_MLX_LIBRARY"
_LIBRARY_BASENAME = "libonnxruntime_ep_mlx"

_register_lock = threading.Lock()
_registered_path: str | None = None


def ep_name() -> str:
    """Name under which the EP reports itself to ONNX Runtime."""
    return _EP_NAME


def version() -> str:
    """Version of this package."""
    return __version__


def _library_file_names() -> list[str]:
    """Shared library names to look for, platform's native suffix first."""
    if sys.platform == "darwin":
        return [_LIBRARY_BASENAME + ".dylib", _LIBRARY_BASENAME + ".so"]
    return [_LIBRARY_BASENAME + ".so", _LIBRARY_BASENAME + ".dylib"]


def _candidate_paths() -> list[Path]:
    """Locations searched by :func:`library_path`, in order (env var excluded)."""
    package_dir = Path(__file__).resolve().parent
    # python/onnxruntime_ep_mlx/__init__.py -> repository root is two levels up.
    repo_build = package_dir.parent.parent / "build"
    names = _library_file_names()
    return [package_dir / "lib" / n for n in names] + [repo_build / n for n in names]


def library_path() -> str:
    """Return the path of the EP shared library.

    Search order:

    1. ``$ONNXRUNTIME_EP_MLX_LIBRARY`` (must name an existing file when set);
    2. ``onnxruntime_ep_mlx/lib/libonnxruntime_ep_mlx.{so,dylib}`` installed
       next to this package (wheel layout);
    3. ``build/libonnxruntime_ep_mlx.{so,dylib}`` of the source checkout that
       this package lives in (development layout).

    Raises:
        FileNotFoundError: if no library is found.
    """
    env_path = os.environ.get(_LIBRARY_ENV)
    if env_path:
        if not os.path.isfile(env_path):
            raise FileNotFoundError(f"{_LIBRARY_ENV}={env_path!r} does not name an existing file")
        return os.path.abspath(env_path)

    candidates = _candidate_paths()
    for candidate in candidates:
        if candidate.is_file():
            return str(candidate)
    searched = "\n  ".join(str(c) for c in candidates)
    raise FileNotFoundError(
        f"{_LIBRARY_BASENAME} not found. Searched:\n  {searched}\n"
        f"Build it (e.g. `make` in the repository) or set {_LIBRARY_ENV} to its path."
    )


def register_execution_provider_library(path: str | None = None) -> str:
    """Register the EP library with ONNX Runtime; safe to call repeatedly.

    ONNX Runtime keeps registrations per process (in its global environment),
    so the first successful call wins and later calls are no-ops. A registration
    made by someone else under the same name (ORT answers "already registered")
    is accepted too.

    Args:
        path: library to register; defaults to :func:`library_path`.

    Returns:
        The path that was registered (or the requested path when ORT reported the
        name as already registered by other code).
    """
    global _registered_path
    with _register_lock:
        if _registered_path is not None:
            return _registered_path
        import onnxruntime as ort

        lib = path or library_path()
        try:
            ort.register_execution_provider_library(_EP_NAME, lib)
        except Exception as exc:  # ORT raises its own Fail/RuntimeError types
            if "already registered" not in str(exc).lower():
                raise
        _registered_path = lib
        return lib


def get_ep_devices() -> list[Any]:
    """Return the ``onnxruntime.OrtEpDevice`` objects served by the MLX EP.

    Registers the library first if needed.
    """
    import onnxruntime as ort

    register_execution_provider_library()
    return [d for d in ort.get_ep_devices() if d.ep_name == _EP_NAME]


def device_memory_info() -> Any | None:
    """The ``onnxruntime.OrtMemoryInfo`` of the EP's device memory, or None when the EP has none
    (MLX on the CPU, or ``ONNXRUNTIME_EP_MLX_DEVICE_MEMORY=0``). Allocate device values with
    ``OrtValue.ortvalue_from_shape_and_type(shape, dtype, memory_info=device_memory_info())``."""
    import onnxruntime as ort

    for device in get_ep_devices():
        info = device.memory_info(ort.OrtDeviceMemoryType.DEFAULT)
        if info is not None:
            return info
    return None


def binding_device() -> tuple[str, int]:
    """The ``(device_type, device_id)`` that names the EP's device memory in
    ``IOBinding.bind_output(name, device_type, device_id)``, so that ONNX Runtime allocates
    outputs there; ``("cpu", 0)`` when the EP has no device memory. The EP's memory is a GPU
    memory of vendor id 0 (so that it never shares ORT's environment-wide allocator with the CUDA
    EP's NVIDIA memory), which Python's device name ``"webgpu"`` means in every onnxruntime build
    (``"gpu"`` means vendor 0 in the CPU build but NVIDIA in onnxruntime-gpu)."""
    info = device_memory_info()
    if info is None:
        return ("cpu", 0)
    names = {0: "webgpu", 0x10DE: "cuda"}
    if info.device_vendor_id not in names:
        raise RuntimeError(f"no Python device name for vendor id {info.device_vendor_id:#x}")
    return (names[info.device_vendor_id], info.device_id)


def append_to_session_options(so: Any, provider_options: Mapping[str, Any] | None = None) -> None:
    """Add the MLX EP to ``so`` (an ``onnxruntime.SessionOptions``).

    Uses ``SessionOptions.add_provider_for_devices`` with every OrtEpDevice the
    EP reports. ONNX Runtime appends the CPU EP as fallback automatically.
    Create the session *without* a ``providers=`` argument afterwards: passing
    one makes ONNX Runtime ignore the providers configured here. (Once the
    library is registered, ONNX Runtime >= 1.31 also accepts
    ``providers=["MLXExecutionProvider", "CPUExecutionProvider"]`` by name.)

    Note that the Python ``InferenceSession`` retries on CPU alone, printing
    "EP Error", when session creation with an EP fails; pass
    ``enable_fallback=0`` to it to get the error instead.

    Args:
        so: the session options to modify.
        provider_options: EP options (README, "Provider options": ``use_tf32``; an
            unknown key fails session creation); keys and values are converted to ``str``.

    Raises:
        RuntimeError: if the library registered but exposes no MLX device.
    """
    devices = get_ep_devices()
    if not devices:
        raise RuntimeError(
            f"{_EP_NAME} library {_registered_path!r} is registered but reports no OrtEpDevice"
        )
    options = {str(k): str(v) for k, v in (provider_options or {}).items()}
    so.add_provider_for_devices(devices, options)


def claim_report(model_path: str) -> dict[str, Any]:
    """The EP's claim report for ``model_path`` (see :mod:`onnxruntime_ep_mlx.report`)."""
    from .report import collect_report

    return collect_report(model_path)
