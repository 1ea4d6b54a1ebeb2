"""The RPC layer: gRPC services (proto <-> domain, errors -> status codes) and delivery."""
