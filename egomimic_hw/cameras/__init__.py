"""Camera backends. Every backend yields RGB uint8 frames (H, W, 3) stamped at capture."""
