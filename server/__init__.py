"""The runtime: engine (writer thread over the store), gRPC service, delivery, CLI."""
