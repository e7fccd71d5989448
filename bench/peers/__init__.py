"""The peers benchmark (bench/peers_bench.py): the sharded state, the peers, the measurements."""
