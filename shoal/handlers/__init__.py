"""Request handlers: one module per API family; each handler declares its key and versions."""
