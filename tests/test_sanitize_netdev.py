"""Network interface names and link-layer addresses through the one sanitizer
(sanitize/netdev.py): a name that spells a MAC or where the card sits is replaced, as the MAC
or the bus id is, in every letter case; names that only count devices are kept. Identifiers are
generated (a fixed seed), on the free-text rules and on `xid --sanitize` and `health
--sanitize`."""

from __future__ import annotations

import argparse
import random
import re

import pytest

from gputop_diag import sim
from gputop_diag.cli import main
from gputop_diag.commands import health as health_command
from gputop_diag.sanitize.sanitizer import Sanitizer

KEY = b"netdev-test-key-0123456789abcdef"
SPELLINGS = (str.lower, str.upper, str.title, str.swapcase)


def nics(seed: int, n: int = 6) -> list[dict]:
    """Ports with their bus ids and the interface names systemd gives them."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        domain, bus, slot = rng.choice((0, 0, 4)), rng.randint(1, 250), rng.randint(0, 31)
        fn = rng.randint(0, 1)
        pdom = f"P{domain}" if domain else ""
        out.append(
            {
                "bus_id": f"{domain:04x}:{bus:02x}:{slot:02x}.{fn}",
                "en": f"en{pdom}p{bus}s{slot}f{fn}np{fn}",
                "ib": f"ib{pdom}p{bus}s{slot}",
                "slot": f"ens{rng.randint(1, 40)}f{fn}",
                "mac": "".join(f"{rng.randrange(256):02x}" for _ in range(6)),
            }
        )
    return out


def absent(raw: str, out: str) -> bool:
    return raw.lower() not in out.lower()


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_slot_and_mac_bearing_names_are_replaced_in_every_spelling(seed):
    s = Sanitizer(KEY)
    for nic in nics(seed):
        for name in (nic["en"], nic["ib"], nic["slot"], "enx" + nic["mac"]):
            seen = set()
            for spell in SPELLINGS:
                raw = spell(name)
                out = s.text(f"mlx5_core: {raw}: Link down")
                assert absent(name, out), (raw, out)
                seen.add(out.lower())
            assert len(seen) == 1, seen  # one device, one pseudonym, whatever the case
        # a name that spells the bus id gets the bus id's pseudonym: the reader can pair them
        out = s.text(f"mlx5_core {nic['bus_id']} {nic['en']}: Link down")
        pci = re.findall(r"pci-\w+", out)
        assert len(pci) == 2 and pci[0] == pci[1], out
        assert out.split()[2].endswith(f"-f{nic['en'][-1]}np{nic['en'][-1]}:")  # the port kept
        # ... and a MAC-named one the MAC's, in its colon form
        colon = ":".join(re.findall("..", nic["mac"]))
        out = s.text(f"enx{nic['mac']} is {colon.upper()}")
        macs = re.findall(r"mac-\w+", out)
        assert len(macs) == 2 and macs[0] == macs[1] and absent(nic["mac"], out), out


def test_names_that_only_count_devices_are_kept():
    s = Sanitizer(KEY)
    text = "eno1 eth0 ib0 bond0 mlx5_0 mlx5_bond_0 enp12s0f1np1"
    out = s.text(text)
    assert out.split()[:6] == text.split()[:6] and "enp12s0f1np1" not in out


@pytest.mark.parametrize("seed", [4, 5])
def test_macs_guids_and_link_local_addresses_in_free_text(seed):
    rng = random.Random(seed)
    s = Sanitizer(KEY)
    for _ in range(5):
        octets = [f"{rng.randrange(256):02x}" for _ in range(6)]
        guid = "".join(f"{rng.randrange(256):02x}" for _ in range(8))
        groups = [f"{rng.randrange(1, 65536):x}" for _ in range(4)]
        forms = {
            "mac": (":".join(octets), "-".join(octets)),
            "guid": ("0x" + guid, ":".join(re.findall("....", guid))),
            "ip6": ("fe80::" + ":".join(groups), "fe80::" + ":".join(groups) + "%ib0"),
        }
        for cls, written in forms.items():
            seen = set()
            for form in written:
                for spell in (str.lower, str.upper):
                    out = s.text(f"port 1 {spell(form)} state ACTIVE")
                    core = form.split("%")[0].removeprefix("0x")
                    assert absent(core, out), (form, out)
                    seen.update(re.findall(rf"{cls}-\w+", out))
            assert len(seen) == 1, (cls, written, seen)


def kernel_log(seed: int) -> tuple[list[str], list[str]]:
    """(lines, identifiers): an Xid and ports going down and up on generated NICs."""
    lines = ["[  100.000000] NVRM: Xid (PCI:0000:18:00): 79, pid=1234, name=python, GPU has "
             "fallen off the bus."]  # fmt: skip
    ids = []
    for k, nic in enumerate(nics(seed, 3)):
        for j, state in enumerate(("down", "up", "down")):
            t = 101 + 10 * k + j
            lines.append(f"[  {t}.000000] mlx5_core {nic['bus_id']} {nic['en']}: Link {state}")
        ids += [nic["en"], nic["bus_id"]]
    return lines, ids


@pytest.mark.parametrize("as_json", [False, True])
def test_xid_sanitize_names_no_interface(tmp_path, capsys, as_json):
    lines, ids = kernel_log(7)
    log = tmp_path / "kern.log"
    log.write_text("\n".join(lines) + "\n", encoding="utf-8")
    args = ["--demo", "idle", "xid", "--log", str(log), *(["--json"] if as_json else [])]
    assert main(args) == 0
    plain = capsys.readouterr().out
    assert all(i in plain for i in ids)  # the command shows them: the check below can fail
    assert main([*args, "--sanitize"]) == 0
    out = capsys.readouterr().out
    assert "network port link down" in out
    assert [i for i in ids if not absent(i, out)] == []


def test_health_sanitize_names_no_interface(capsys):
    lines, ids = kernel_log(8)
    sources = sim.build("compute-bound")
    start = sources.clock.now()
    for k, line in enumerate(lines):
        sources.sim.kernel_lines.append((start - 600 + k, line.split("] ", 1)[1]))
    ns = argparse.Namespace(json=False, pid=[], no_lspci=True, sanitize=False)
    assert health_command.run(ns, sources) == 0
    plain = capsys.readouterr().out
    names = [i for i in ids if i.startswith("en")]
    assert any(n in plain for n in names), plain  # a finding names the port
    ns.sanitize = True
    assert health_command.run(ns, sources) == 0
    out = capsys.readouterr().out
    assert "went down" in out
    assert [i for i in ids if not absent(i, out)] == []
