"""Reference epsilons for tessel's RDP accountant (src/secure/rdp_accountant.h), from Opacus.

For each (sample rate q, noise multiplier sigma, steps, delta) it asks Opacus's RDPAccountant
(the default orders) for epsilon and writes src/secure/testdata/rdp_reference.json, which
src/secure/rdp_accountant_test.cpp compares against (within 1%).

    python3 -m venv --system-site-packages /tmp/opacus && /tmp/opacus/bin/pip install opacus scipy
    /tmp/opacus/bin/python tools/pytorch/dp_accountant_reference.py
"""
import json
import pathlib

import opacus
from opacus.accountants import RDPAccountant

CASES = [
    # q, sigma, steps, delta
    (256 / 60000, 1.1, 60000 // 256 * 60, 1e-5),  # the Abadi et al. MNIST setting, 60 epochs
    (256 / 60000, 1.1, 60000 // 256 * 1, 1e-5),
    (128 / 60000, 0.8, 938, 1e-5),  # fashion_mlp: 2 epochs of 128 at sigma 0.8
    (0.01, 1.0, 1000, 1e-5),
    (0.01, 4.0, 10000, 1e-6),
    (0.05, 0.7, 300, 1e-5),
    (0.001, 0.6, 5000, 1e-5),
    (0.1, 2.0, 100, 1e-3),
    (1.0, 5.0, 10, 1e-5),  # no sampling: the Gaussian mechanism composed
    (0.02, 1.3, 2500, 1e-5),
]


def main():
    out = []
    for q, sigma, steps, delta in CASES:
        accountant = RDPAccountant()
        accountant.history = [(sigma, q, steps)]
        eps, alpha = accountant.get_privacy_spent(delta=delta)
        out.append({"sample_rate": q, "noise_multiplier": sigma, "steps": steps,
                    "delta": delta, "epsilon": float(eps), "order": float(alpha)})
    path = pathlib.Path(__file__).resolve().parents[2] / "src/secure/testdata/rdp_reference.json"
    path.write_text(json.dumps({"opacus": opacus.__version__, "cases": out}, indent=1) + "\n")
    for c in out:
        print(c)


if __name__ == "__main__":
    main()
