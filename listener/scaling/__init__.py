"""The elastic scaler that applies scaling rules to a running pool, and the CPU guard."""
