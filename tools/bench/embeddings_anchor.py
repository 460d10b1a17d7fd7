#!/usr/bin/env python3
"""The PyTorch anchor for `favlo bench embeddings`: sentence-transformers on CPU, 2 threads.

Times SentenceTransformer(<model dir>).encode over the same 1,024-sentence corpus
(pipelines/bert/bench/corpus.txt) at the same batch sizes (1, 8, 32) as favlo_bert::bench,
plus the p50/p90 latency of the same short sentence, and prints a Markdown table.

Usage: python3 tools/bench/embeddings_anchor.py <all-MiniLM-L6-v2 folder> [--threads 2]
"""
import argparse
import pathlib
import statistics
import time

import torch
from sentence_transformers import SentenceTransformer

SHORT_SENTENCE = "The cat sat on the warm windowsill."  # same as favlo_bert::bench::SHORT_SENTENCE


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model_dir")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batches", default="1,8,32")
    ap.add_argument("--latency-runs", type=int, default=200)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(1)
    corpus_path = pathlib.Path(__file__).resolve().parents[2] / "pipelines/bert/bench/corpus.txt"
    corpus = [l for l in corpus_path.read_text(encoding="utf-8").splitlines() if l.strip()]
    model = SentenceTransformer(args.model_dir, device="cpu")
    model.eval()
    with torch.inference_mode():
        model.encode(corpus[:32], batch_size=32)  # warm-up
        print(f"sentence-transformers, torch {torch.__version__}, {args.threads} threads, {len(corpus)} sentences")
        # Third column: sentences per process CPU-second × threads (what the rate would be with
        # the threads' cores to itself on a shared machine; OpenMP's spin-waiting counts as
        # use, so under contention this understates PyTorch).
        print("| batch | sentences/s | sentences per CPU-second × threads |\n|---:|---:|---:|")
        for b in (int(x) for x in args.batches.split(",")):
            start, cpu0 = time.perf_counter(), time.process_time()
            # One encode call per batch, as favlo runs one forward per batch (encode also sorts by length).
            for i in range(0, len(corpus), b):
                model.encode(corpus[i:i + b], batch_size=b)
            dt, cpu = time.perf_counter() - start, time.process_time() - cpu0
            print(f"| {b} | {len(corpus) / dt:.1f} | {len(corpus) * args.threads / cpu:.1f} |", flush=True)
        lat = []
        for _ in range(args.latency_runs):
            start = time.perf_counter()
            model.encode([SHORT_SENTENCE], batch_size=1)
            lat.append((time.perf_counter() - start) * 1e3)
        lat.sort()
        p90 = lat[round((len(lat) - 1) * 0.9)]
        print(f"\np50 latency (one short sentence): {statistics.median(lat):.2f} ms (p90 {p90:.2f} ms)")


if __name__ == "__main__":
    main()
