"""The generated gRPC stubs (entrokv/v1/, made at build time by gen_stubs.py)."""

try:
    from .v1 import entrokv_pb2 as pb2  # noqa: F401
    from .v1 import entrokv_pb2_grpc as pb2_grpc  # noqa: F401
except ImportError as e:  # pragma: no cover - depends on the install
    raise ImportError(
        "entrokv: the generated stubs (entrokv/v1/entrokv_pb2.py) are missing: "
        "install the package (pip install --no-build-isolation ./client/python) "
        "or run `python3 client/python/gen_stubs.py client/python/src` for a "
        "PYTHONPATH checkout") from e
