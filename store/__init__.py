"""RocksDB storage: owns every byte written to disk."""
