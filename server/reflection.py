"""Server reflection under both its names: `grpc.reflection.v1` and `grpc.reflection.v1alpha`.

grpcio-reflection implements only v1alpha, while current tools (grpcurl, Postman, grpc_cli)
ask for v1 first and fall back to v1alpha only on UNIMPLEMENTED; some newer clients know
v1 alone. The v1 protocol is v1alpha under a new package name: the same messages with
the same field numbers (grpc-proto's grpc/reflection/v1/reflection.proto), so the one
servicer answers both, with v1alpha's serializers on the wire.

So that a client can also describe the v1 service it lists, its file is added to the
descriptor pool reflection answers from: v1alpha's file, renamed (package, file name and
every type reference), unless something already registered it.
"""

from __future__ import annotations

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool
from grpc_reflection.v1alpha import reflection, reflection_pb2

V1ALPHA_SERVICE = reflection.SERVICE_NAME  # grpc.reflection.v1alpha.ServerReflection
V1_PACKAGE = "grpc.reflection.v1"
V1_SERVICE = f"{V1_PACKAGE}.ServerReflection"
V1_FILE = "grpc/reflection/v1/reflection.proto"
SERVICE_NAMES = (V1_SERVICE, V1ALPHA_SERVICE)


def v1_file() -> descriptor_pb2.FileDescriptorProto:
    """grpc/reflection/v1/reflection.proto, as v1alpha's file renamed."""
    old = reflection_pb2.DESCRIPTOR.package
    proto = descriptor_pb2.FileDescriptorProto()
    reflection_pb2.DESCRIPTOR.CopyToProto(proto)
    proto.name = V1_FILE
    proto.package = V1_PACKAGE
    proto.ClearField("options")  # v1alpha's java/objc options name v1alpha's packages

    def renamed(type_name: str) -> str:
        return type_name.replace(f".{old}.", f".{V1_PACKAGE}.", 1)

    messages = list(proto.message_type)
    while messages:
        message = messages.pop()
        messages.extend(message.nested_type)
        for field in message.field:
            if field.type_name:
                field.type_name = renamed(field.type_name)
    for service in proto.service:
        for method in service.method:
            method.input_type = renamed(method.input_type)
            method.output_type = renamed(method.output_type)
    return proto


def register_v1(pool: descriptor_pool.DescriptorPool) -> None:
    """Add the v1 file to `pool`, unless it is there already (a later grpcio-reflection
    or another library may ship it)."""
    try:
        pool.FindFileByName(V1_FILE)
    except KeyError:
        pool.Add(v1_file())


def enable(service_names: tuple[str, ...], server: grpc.Server) -> None:
    """Reflection on `server` under both names, listing `service_names` and itself."""
    pool = descriptor_pool.Default()
    register_v1(pool)
    servicer = reflection.ReflectionServicer((*service_names, *SERVICE_NAMES), pool=pool)
    handler = grpc.stream_stream_rpc_method_handler(
        servicer.ServerReflectionInfo,
        request_deserializer=reflection_pb2.ServerReflectionRequest.FromString,
        response_serializer=reflection_pb2.ServerReflectionResponse.SerializeToString,
    )
    for name in SERVICE_NAMES:
        methods = {"ServerReflectionInfo": handler}
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(name, methods),))
        server.add_registered_method_handlers(name, methods)
