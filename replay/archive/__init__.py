"""The monthly archive (ADR-25): Parquet, a signed Merkle tree head per month chained to the
previous month's, Object Lock on S3; an offline verifier and inclusion proofs."""
