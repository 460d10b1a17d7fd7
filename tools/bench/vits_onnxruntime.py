#!/usr/bin/env python3
"""onnxruntime's real-time factor on a Piper voice, the anchor for favlo-vits's
`vits_bench` example (same text, same model, same thread count, default scales).

Phonemizes with the piper-tts package, runs each sentence through onnxruntime
(CPU, intra_op_num_threads = threads, inter_op 1), repeats, and prints seconds
of compute per second of audio (best and median; the first run is a warm-up),
and the process CPU time per audio second (less sensitive to a busy machine).

Usage: pip install piper-tts onnxruntime
       python3 tools/bench/vits_onnxruntime.py /path/en_US-joe-medium.onnx [threads] [runs]
"""

import json
import sys
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort
from piper.config import PiperConfig
from piper.phoneme_ids import phonemes_to_ids
from piper.phonemize_espeak import EspeakPhonemizer

TEXT = (
    "The quick brown fox jumps over the lazy dog. "
    "Favlo runs every model on one machine, sharing the accelerator fairly. "
    "Is this the right way to the station? "
    "On January fifth, we met at half past ten and talked for an hour."
)


def main() -> None:
    onnx_path = Path(sys.argv[1])
    threads = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    runs = int(sys.argv[3]) if len(sys.argv) > 3 else 5
    config = PiperConfig.from_dict(json.loads(Path(str(onnx_path) + ".json").read_text(encoding="utf-8")))
    sentences = EspeakPhonemizer().phonemize(config.espeak_voice, TEXT)
    ids = [phonemes_to_ids(s, config.phoneme_id_map) for s in sentences if s]
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    sess = ort.InferenceSession(str(onnx_path), opts, providers=["CPUExecutionProvider"])
    scales = np.array([config.noise_scale, config.length_scale, config.noise_w_scale], dtype=np.float32)
    rtfs = []
    cpu = []
    for run in range(runs + 1):
        c0 = time.process_time()
        t0 = time.perf_counter()
        n = 0
        for seq in ids:
            x = np.array([seq], dtype=np.int64)
            out = sess.run(None, {"input": x, "input_lengths": np.array([x.shape[1]], dtype=np.int64), "scales": scales})[0]
            n += out.size
        secs = time.perf_counter() - t0
        audio = n / config.sample_rate
        if run > 0:
            rtfs.append(secs / audio)
            cpu.append((time.process_time() - c0) / audio)
    rtfs.sort()
    cpu.sort()
    print(
        f"onnxruntime {ort.__version__}: {len(ids)} sentences, {audio:.2f} s of audio, {threads} threads: "
        f"RTF best {rtfs[0]:.3f}, median {rtfs[len(rtfs) // 2]:.3f}; "
        f"CPU-seconds per audio second median {cpu[len(cpu) // 2]:.3f} ({len(rtfs)} runs)"
    )


if __name__ == "__main__":
    main()
