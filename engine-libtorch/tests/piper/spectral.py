"""Log-mel spectral distance between pairs of WAVs (16-bit mono): how far int8's audio is from
fp32's in what a listener hears (the spectral envelope over time), where the waveform's SNR also
counts phase. Numpy only (.venv-piper's or .venv-whisper's python).

    spectral.py A.wav B.wav [A2.wav B2.wav ...]

Prints per pair the mean absolute difference of 80-band log-mel spectra (dB energies, 25 ms
windows, 10 ms hop) over the frames within 60 dB of the loudest, the same over the cells (frame,
band) within 50 dB of the loudest cell (where a noise floor in quiet bands does not count), and
the segmental SNR (20 ms frames within 40 dB of the loudest, each clipped to -10..35 dB); then
their means.
"""
import sys
import wave

import numpy as np


def read(path):
    with wave.open(path) as w:
        rate = w.getframerate()
        x = np.frombuffer(w.readframes(w.getnframes()), dtype=np.int16).astype(np.float64) / 32768.0
    return x, rate


def mel_filters(rate, n_fft, bands=80):
    hz_to_mel = lambda f: 2595.0 * np.log10(1.0 + f / 700.0)
    mel_to_hz = lambda m: 700.0 * (10 ** (m / 2595.0) - 1.0)
    mels = np.linspace(hz_to_mel(0), hz_to_mel(rate / 2), bands + 2)
    bins = np.floor((n_fft + 1) * mel_to_hz(mels) / rate).astype(int)
    fb = np.zeros((bands, n_fft // 2 + 1))
    for b in range(bands):
        lo, mid, hi = bins[b], bins[b + 1], bins[b + 2]
        for k in range(lo, mid):
            fb[b, k] = (k - lo) / max(mid - lo, 1)
        for k in range(mid, hi):
            fb[b, k] = (hi - k) / max(hi - mid, 1)
    return fb


def log_mel(x, rate):
    win, hop = int(0.025 * rate), int(0.010 * rate)
    n_fft = 1 << (win - 1).bit_length()
    frames = np.lib.stride_tricks.sliding_window_view(x, win)[::hop] * np.hanning(win)
    spec = np.abs(np.fft.rfft(frames, n_fft)) ** 2
    return 10 * np.log10(spec @ mel_filters(rate, n_fft).T + 1e-10)


def distance(a, b):
    (xa, rate), (xb, _) = read(a), read(b)
    n = min(len(xa), len(xb))
    ma, mb = log_mel(xa[:n], rate), log_mel(xb[:n], rate)
    loud = ma.max(axis=1) > ma.max() - 60
    cells = ma > ma.max() - 50
    seg = int(0.020 * rate)
    fa = xa[: n // seg * seg].reshape(-1, seg)
    fe = fa - xb[: n // seg * seg].reshape(-1, seg)
    ea, ee = (fa**2).sum(1), (fe**2).sum(1)
    keep = ea > ea.max() * 1e-4
    snr = np.clip(10 * np.log10(ea[keep] / np.maximum(ee[keep], 1e-20)), -10, 35)
    return (
        float(np.mean(np.abs(ma[loud] - mb[loud]))),
        float(np.mean(np.abs(ma[cells] - mb[cells]))),
        float(np.mean(snr)),
    )


if __name__ == "__main__":
    files = sys.argv[1:]
    ds = []
    for a, b in zip(files[::2], files[1::2]):
        d = distance(a, b)
        ds.append(d)
        print(f"log-mel {d[0]:.2f} dB, loud cells {d[1]:.2f} dB, segmental SNR {d[2]:.1f} dB\t{a}\t{b}")
    m = np.mean(ds, axis=0)
    print(f"mean: log-mel {m[0]:.2f} dB, loud cells {m[1]:.2f} dB, segmental SNR {m[2]:.1f} dB")
