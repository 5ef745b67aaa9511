"""Node work runs here, in processes with OS limits, never on the server's event loop."""
