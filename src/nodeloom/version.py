"""The version of this Nodeloom, on its own so that the server reads it without the package
root, which hands out the client."""

__version__ = "0.1.0"
