"""System-state collectors and sampler.

The GPU readings these tests parse were captured on a real NVIDIA H200 by
tools/capture_gpu_fixtures.py (idle, under a bf16 matmul load, and after it) and are committed
under tests/fixtures/gpu/. Where no GPU exists, NVML is replayed through ``FakeNvmlFromFixture``
(it answers each NVML call with the result recorded on the H200) and nvidia-smi through a fake
executable that prints the captured output. Tests marked ``gpu`` read a real GPU and are skipped
where there is none.
"""

from __future__ import annotations

import json
import os
import platform
import random
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from importlib.util import find_spec
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import psutil
import pytest

from perfbisect.measure import sysstate
from perfbisect.errors import ConfigError, MachineBusy
from perfbisect.measure.host import (
    _process_name,
    gpu_busy_processes,
    gpu_memory_released,
    gpu_memory_used_mib,
    host_fingerprint,
    wait_until_idle,
)
from perfbisect.model import GpuSample, SystemSnapshot
from perfbisect.report.render import format_snapshot
from perfbisect.store.samples import compact, expand_compact
from perfbisect.measure.versions import target_versions

FIXTURES = Path(__file__).parent / "fixtures" / "gpu"


def load_fixture(name: str) -> Any:
    return json.loads((FIXTURES / name).read_text())


NVML_DUMP = load_fixture("nvml-readings.json")
SMI_DUMP = load_fixture("nvidia-smi-query.json")
LIVE = load_fixture("sampler-live.json")


# ---------------------------------------------------------------------------------------------
# Fakes standing in for the GPU where there is none


class FakeNvmlError(Exception):
    def __init__(self, value: int | None, text: str = "") -> None:
        super().__init__(text)
        self.value = value
        self.text = text

    def __str__(self) -> str:
        return self.text


class FakeHandle:
    def __init__(self, index: int) -> None:
        self.index = index


def _as_object(value: Any) -> Any:
    if isinstance(value, dict):
        return SimpleNamespace(**{k: _as_object(v) for k, v in value.items()})
    if isinstance(value, list):
        return [_as_object(v) for v in value]
    return value


class FakeNvmlFromFixture:
    """A fake pynvml module: answers each call with what the real one returned on the H200.

    ``select(i)`` chooses which captured sample answers; a call the capture never saw fails the
    test, so the collector cannot silently read something the fixture does not hold.
    """

    NVMLError = FakeNvmlError

    def __init__(self, dump: dict[str, Any], sample: int = 0) -> None:
        self._dump = dump
        for name, value in dump["constants"].items():
            setattr(self, name, value)
        self._recorded = {c["fn"] for c in dump["setup"]} | {
            c["fn"] for s in dump["samples"] for c in s["calls"]
        }
        self.current = sample
        self.calls = 0

    def select(self, sample: int) -> None:
        self.current = sample

    def _lookup(self, fn: str, gpu: int | None, args: list[Any]) -> dict[str, Any]:
        sources = [self._dump["samples"][self.current]["calls"], self._dump["setup"]]
        sources += [s["calls"] for s in self._dump["samples"]]
        for calls in sources:
            for c in calls:
                if c["fn"] == fn and c["gpu"] == gpu and c["args"] == args:
                    return c
        raise AssertionError(f"the collector called {fn}{tuple(args)} on GPU {gpu}; the fixture never recorded it")

    def __getattr__(self, name: str) -> Any:
        if name == "nvmlShutdown":
            return lambda: None
        if name not in self._recorded:
            raise AttributeError(name)

        def call(*args: Any) -> Any:
            self.calls += 1
            gpu = None
            plain = []
            for a in args:
                if isinstance(a, FakeHandle):
                    gpu = a.index
                else:
                    plain.append(a)
            entry = self._lookup(name, gpu, plain)
            if "error" in entry:
                raise FakeNvmlError(entry["error"]["code"], entry["error"]["text"])
            if name == "nvmlDeviceGetHandleByIndex":
                return FakeHandle(entry["result"])
            return _as_object(entry["result"])

        return call


def raw(sample: dict[str, Any], fn: str, gpu: int | None = 0, args: list[Any] | None = None) -> Any:
    """The raw recorded result of one NVML call in one captured sample (None if it errored)."""
    for c in sample["calls"]:
        if c["fn"] == fn and c["gpu"] == gpu and (args is None or c["args"] == args):
            return c.get("result")
    raise KeyError(fn)


def raw_reasons(sample: dict[str, Any], gpu: int) -> int:
    for fn in ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"):
        try:
            return raw(sample, fn, gpu)
        except KeyError:
            pass
    raise KeyError("reasons")


def gpu_count() -> int:
    return next(c["result"] for c in NVML_DUMP["setup"] if c["fn"] == "nvmlDeviceGetCount")


C = NVML_DUMP["constants"]
SAMPLES = NVML_DUMP["samples"]


class FixtureSequenceCollector:
    """A GPU collector fed from the captured NVML sequence, cycling; remembers what it handed out."""

    name = "nvml-fixture"
    kind = "gpu"

    def __init__(self) -> None:
        self.fake = FakeNvmlFromFixture(NVML_DUMP)
        self.inner = sysstate.NvmlCollector(nvml=self.fake)
        self.handed: list[int] = []
        self.notes: list[str] = []

    def available(self) -> bool:
        return self.inner.available()

    def collect(self) -> tuple[GpuSample, ...]:
        i = len(self.handed) % len(SAMPLES)
        self.fake.select(i)
        self.handed.append(i)
        return self.inner.collect()

    def processes(self) -> list[sysstate.GpuProcess]:
        return self.inner.processes()

    def driver_version(self) -> str | None:
        return self.inner.driver_version()


def nvml_at(sample: int) -> sysstate.NvmlCollector:
    return sysstate.NvmlCollector(nvml=FakeNvmlFromFixture(NVML_DUMP, sample))


def phase_indices(phase: str) -> list[int]:
    return [i for i, s in enumerate(SAMPLES) if s["phase"] == phase]


@pytest.fixture
def fake_smi(tmp_path: Path):
    """A fake nvidia-smi executable printing the captured output of one chosen sample."""

    def make(sample: int) -> str:
        data = tmp_path / "smi-sample.json"
        data.write_text(json.dumps(SMI_DUMP["samples"][sample]))
        argv_log = tmp_path / "smi-argv.log"
        script = tmp_path / "fake-nvidia-smi"
        script.write_text(
            f"#!{sys.executable}\n"
            "import json, sys\n"
            f"sample = json.load(open({str(data)!r}))\n"
            f"open({str(argv_log)!r}, 'a').write(json.dumps(sys.argv[1:]) + '\\n')\n"
            "key = 'apps' if sys.argv[1].startswith('--query-compute-apps=') else 'gpu'\n"
            "sys.stdout.write(sample[key]['stdout'])\n"
            "sys.exit(sample[key]['rc'])\n"
        )
        script.chmod(0o755)
        return str(script)

    return make


# ---------------------------------------------------------------------------------------------
# Throttle reasons


def test_throttle_reason_names_decode_each_bit_in_order():
    assert sysstate.throttle_reason_names(0) == []
    assert sysstate.throttle_reason_names(None) == []
    assert sysstate.throttle_reason_names(0x1) == ["GpuIdle"]
    assert sysstate.throttle_reason_names(0x4 | 0x40) == ["SwPowerCap", "HwThermalSlowdown"]
    everything = sum(bit for bit, _ in sysstate.THROTTLE_REASONS)
    assert sysstate.throttle_reason_names(everything) == [
        "GpuIdle", "ApplicationsClocksSetting", "SwPowerCap", "HwSlowdown", "SyncBoost",
        "SwThermalSlowdown", "HwThermalSlowdown", "HwPowerBrakeSlowdown", "DisplayClockSetting",
    ]
    assert sysstate.throttle_reason_names(0x4 | 0x200) == ["SwPowerCap", "Unknown(0x200)"]


def test_idle_alone_is_not_throttling_but_power_cap_is():
    assert not sysstate.is_throttled(None)
    assert not sysstate.is_throttled(0)
    assert not sysstate.is_throttled(0x1)
    assert sysstate.is_throttled(0x4)
    assert sysstate.is_throttled(0x1 | 0x20)


# ---------------------------------------------------------------------------------------------
# NVML, replayed from the H200 capture


def test_fixture_covers_idle_and_load_on_a_real_gpu():
    phases = [s["phase"] for s in SAMPLES]
    assert phases.count("idle") >= 1 and phases.count("load") >= 3 and phases.count("after") >= 1
    clocks = {raw(s, "nvmlDeviceGetClockInfo", 0, [C["NVML_CLOCK_SM"]]) for s in SAMPLES}
    assert len(clocks) > 1, "the capture should show the SM clock moving"


@pytest.mark.parametrize("index", range(len(SAMPLES)))
def test_nvml_collector_reads_what_nvml_returned(index: int):
    sample = SAMPLES[index]
    gpus = nvml_at(index).collect()
    assert len(gpus) == gpu_count()
    for g in gpus:
        i = g.index
        assert g.name == raw(sample, "nvmlDeviceGetName", i)
        assert g.sm_clock_mhz == raw(sample, "nvmlDeviceGetClockInfo", i, [C["NVML_CLOCK_SM"]])
        assert g.mem_clock_mhz == raw(sample, "nvmlDeviceGetClockInfo", i, [C["NVML_CLOCK_MEM"]])
        assert g.sm_clock_max_mhz == raw(sample, "nvmlDeviceGetMaxClockInfo", i, [C["NVML_CLOCK_SM"]])
        assert g.temperature_c == raw(sample, "nvmlDeviceGetTemperature", i, [C["NVML_TEMPERATURE_GPU"]])
        assert g.power_w == pytest.approx(raw(sample, "nvmlDeviceGetPowerUsage", i) / 1000)
        assert g.power_limit_w == pytest.approx(raw(sample, "nvmlDeviceGetEnforcedPowerLimit", i) / 1000)
        assert g.pstate == f"P{raw(sample, 'nvmlDeviceGetPerformanceState', i)}"
        assert g.throttle_reasons == raw_reasons(sample, i)
        assert g.pcie_gen == raw(sample, "nvmlDeviceGetCurrPcieLinkGeneration", i)
        assert g.pcie_width == raw(sample, "nvmlDeviceGetCurrPcieLinkWidth", i)
        memory = raw(sample, "nvmlDeviceGetMemoryInfo", i)
        assert g.memory_used_mib == pytest.approx(memory["used"] / 2**20)
        assert g.memory_total_mib == pytest.approx(memory["total"] / 2**20)
        assert g.utilization_pct == raw(sample, "nvmlDeviceGetUtilizationRates", i)["gpu"]
        compute = raw(sample, "nvmlDeviceGetComputeRunningProcesses", i) or []
        assert set(g.processes) >= {p["pid"] for p in compute}


def test_load_samples_show_the_matmul_process_and_a_throttle_reason():
    load_pid = LIVE["load_pid"]
    load = phase_indices("load")
    for i in load:
        procs = nvml_at(i).processes()
        assert any(p.pid == load_pid and p.used_mib and p.used_mib > 100 for p in procs), procs
    reasons = [g.throttle_reasons for i in load for g in nvml_at(i).collect()]
    assert all(r is not None for r in reasons)
    # Under a sustained bf16 matmul the H200 hits its software power cap in at least one sample.
    assert any(r & sysstate.SW_POWER_CAP for r in reasons), [hex(r) for r in reasons]


def test_nvml_driver_versions_come_from_the_capture():
    sample = SAMPLES[0]
    collector = nvml_at(0)
    assert collector.driver_version() == raw(sample, "nvmlSystemGetDriverVersion", None)
    cuda = raw(sample, "nvmlSystemGetCudaDriverVersion", None)
    assert collector.cuda_driver_version() == f"{cuda // 1000}.{(cuda % 1000) // 10}"


# ---------------------------------------------------------------------------------------------
# nvidia-smi, from the same capture


def test_fixture_was_captured_with_the_collectors_current_query():
    smi = sysstate.NvidiaSmiCollector()
    assert SMI_DUMP["gpu_command"] == smi.gpu_query_command()
    assert SMI_DUMP["apps_command"] == smi.apps_query_command()


@pytest.mark.parametrize("index", range(len(SMI_DUMP["samples"])))
def test_smi_csv_agrees_with_nvml_captured_at_the_same_moment(index: int):
    smi = SMI_DUMP["samples"][index]
    nvml_sample = SAMPLES[index]  # captured back to back, same phase
    assert smi["phase"] == nvml_sample["phase"]
    assert smi["gpu"]["rc"] == 0, smi["gpu"]["stderr"]
    rows = sysstate.parse_smi_gpu_csv(smi["gpu"]["stdout"])
    assert len(rows) == gpu_count()
    for row in rows:
        g, i = row.sample, row.sample.index
        assert g.name == raw(nvml_sample, "nvmlDeviceGetName", i)
        assert row.driver_version == raw(nvml_sample, "nvmlSystemGetDriverVersion", None)
        assert row.uuid and row.uuid.startswith("GPU-")
        assert g.sm_clock_max_mhz == raw(nvml_sample, "nvmlDeviceGetMaxClockInfo", i, [C["NVML_CLOCK_SM"]])
        assert g.mem_clock_max_mhz == raw(nvml_sample, "nvmlDeviceGetMaxClockInfo", i, [C["NVML_CLOCK_MEM"]])
        assert g.memory_total_mib == pytest.approx(raw(nvml_sample, "nvmlDeviceGetMemoryInfo", i)["total"] / 2**20, abs=1)
        assert g.power_limit_w == pytest.approx(raw(nvml_sample, "nvmlDeviceGetEnforcedPowerLimit", i) / 1000, abs=1)
        assert g.pcie_width == raw(nvml_sample, "nvmlDeviceGetCurrPcieLinkWidth", i)
        assert g.pstate and g.pstate.startswith("P")
        assert g.throttle_reasons is not None and 0 < g.sm_clock_mhz <= g.sm_clock_max_mhz
        assert 0 < g.power_w < 2 * g.power_limit_w


def test_smi_csv_parser_handles_not_available_and_legacy_field_names():
    fields = ("index", "uuid", "name", "clocks.sm", "power.draw", "clocks_throttle_reasons.active", "ecc.errors.uncorrected.volatile.total", "pstate")
    text = "0, GPU-1, Some GPU, 1410, [N/A], 0x0000000000000005, [Not Supported], P2\n"
    (row,) = sysstate.parse_smi_gpu_csv(text, fields)
    assert row.sample.sm_clock_mhz == 1410
    assert row.sample.power_w is None and row.sample.ecc_errors is None
    assert row.sample.throttle_reasons == 0x5
    with pytest.raises(ValueError, match="columns"):
        sysstate.parse_smi_gpu_csv("0, GPU-1\n", fields)


def test_nvidia_smi_collector_runs_the_query_as_a_subprocess(fake_smi, tmp_path: Path):
    load = phase_indices("load")[0]
    collector = sysstate.NvidiaSmiCollector(executable=fake_smi(load))
    assert collector.available()
    gpus = collector.collect()
    smi = SMI_DUMP["samples"][load]
    expected = sysstate.parse_smi_apps_csv(
        smi["apps"]["stdout"],
        {r.uuid: r.sample.index for r in sysstate.parse_smi_gpu_csv(smi["gpu"]["stdout"])},
    )
    assert expected, "the load sample should list the matmul process"
    for g in gpus:
        assert set(g.processes) == {p.pid for p in expected if p.gpu_index == g.index}
    assert LIVE["load_pid"] in {p.pid for p in collector.processes()}
    argvs = [json.loads(line) for line in (tmp_path / "smi-argv.log").read_text().splitlines()]
    assert argvs[0] == collector.gpu_query_command()[1:]
    assert collector.driver_version() == sysstate.parse_smi_gpu_csv(smi["gpu"]["stdout"])[0].driver_version


def test_xml_capture_names_the_same_gpu_and_driver():
    for name in ("nvidia-smi-q-idle.xml", "nvidia-smi-q-load.xml"):
        root = ET.parse(FIXTURES / name).getroot()
        assert root.findtext("driver_version") == raw(SAMPLES[0], "nvmlSystemGetDriverVersion", None)
        products = [gpu.findtext("product_name") for gpu in root.findall("gpu")]
        assert products == [raw(SAMPLES[0], "nvmlDeviceGetName", i) for i in range(gpu_count())]


# ---------------------------------------------------------------------------------------------
# Summary and sampler


def expected_summary_from_raw(indices: list[int]) -> dict[str, Any]:
    """The summary numbers computed straight from the raw NVML results, not through the collector."""
    clocks = [raw(SAMPLES[i], "nvmlDeviceGetClockInfo", g, [C["NVML_CLOCK_SM"]]) for i in indices for g in range(gpu_count())]
    throttled = [any(raw_reasons(SAMPLES[i], g) & ~0x1 for g in range(gpu_count())) for i in indices]
    seen = 0
    for i in indices:
        for g in range(gpu_count()):
            seen |= raw_reasons(SAMPLES[i], g)
    temps = [raw(SAMPLES[i], "nvmlDeviceGetTemperature", g, [C["NVML_TEMPERATURE_GPU"]]) for i in indices for g in range(gpu_count())]
    return {
        "min": min(clocks), "max": max(clocks), "mean": sum(clocks) / len(clocks),
        "throttled": sum(throttled) / len(throttled), "seen": seen, "tmax": max(temps),
    }


def test_summary_of_the_captured_sequence():
    indices = list(range(len(SAMPLES)))
    snaps = []
    for i in indices:
        snaps.append(SystemSnapshot(t=SAMPLES[i]["t"], gpus=nvml_at(i).collect(), source="nvml"))
    summary = sysstate.summarize(snaps, exclude_pids=[LIVE["load_pid"]])
    want = expected_summary_from_raw(indices)
    assert summary.samples == len(SAMPLES)
    assert summary.sm_clock_min_mhz == want["min"]
    assert summary.sm_clock_max_mhz == want["max"]
    assert summary.sm_clock_mean_mhz == pytest.approx(want["mean"])
    assert summary.throttled_fraction == pytest.approx(want["throttled"])
    assert summary.throttle_reasons_seen == want["seen"]
    assert summary.temperature_max_c == want["tmax"]
    assert LIVE["load_pid"] not in summary.other_gpu_processes
    # Without the exclusion, the matmul process is another process on the GPU.
    assert LIVE["load_pid"] in sysstate.summarize(snaps).other_gpu_processes


def test_sampler_thread_on_the_fixture_sequence():
    feeder = FixtureSequenceCollector()
    with sysstate.Sampler(interval_s=0.01, collectors=[feeder, sysstate.ProcCollector()]) as sampler:
        deadline = time.monotonic() + 5
        while len(feeder.handed) < len(SAMPLES) + 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        thread = sampler._thread
        assert thread is not None and thread.daemon and thread.is_alive()
    assert not thread.is_alive()
    snaps = sampler.snapshots
    assert len(snaps) == len(feeder.handed) >= len(SAMPLES) + 3  # before + during + after
    assert [s.t for s in snaps] == sorted(s.t for s in snaps)
    assert all(s.source == "nvml-fixture+proc" and s.load_avg_1m is not None for s in snaps)
    want = expected_summary_from_raw(feeder.handed)
    summary = sampler.summary()
    assert summary.sm_clock_min_mhz == want["min"] and summary.sm_clock_max_mhz == want["max"]
    assert summary.throttled_fraction == pytest.approx(want["throttled"])
    assert summary.throttle_reasons_seen == want["seen"]
    assert summary.notes == ()
    # A window keeps only the snapshots inside it.
    middle = snaps[len(snaps) // 2].t
    assert sampler.summary(since=middle).samples == sum(1 for s in snaps if s.t >= middle)


def test_live_sampler_run_on_the_h200_saw_the_power_cap():
    summary = LIVE["summary"]
    assert summary["samples"] >= 10
    assert summary["throttle_reasons_seen"] & sysstate.SW_POWER_CAP
    assert summary["throttled_fraction"] > 0.5
    snaps = expand_compact(LIVE["compact"])
    assert len(snaps) == summary["samples"]
    again = sysstate.summarize(snaps)
    assert again.sm_clock_min_mhz == summary["sm_clock_min_mhz"]
    assert again.throttled_fraction == pytest.approx(summary["throttled_fraction"])


# ---------------------------------------------------------------------------------------------
# CPU load and frequency, and degradation


def _raise(exc: BaseException) -> Any:
    def fail(*args: Any, **kwargs: Any) -> Any:
        raise exc

    return fail



def test_proc_collector_reads_this_machine():
    collector = sysstate.ProcCollector()
    assert collector.available()
    reading = collector.collect()
    assert reading.load_avg_1m is not None and reading.load_avg_1m >= 0
    if any(f.current > 0 for f in psutil.cpu_freq(percpu=True) or ()):
        assert reading.cpu_mhz is not None and reading.cpu_mhz > 0
    else:
        assert reading.cpu_mhz is None and len(collector.notes) == 1
    snap = sysstate.collect_snapshot([sysstate.ProcCollector()])
    assert snap.source == "proc" and snap.gpus == ()


def test_proc_collector_averages_the_online_cores(monkeypatch):
    freq = lambda current, low, high: SimpleNamespace(current=current, min=low, max=high)  # noqa: E731
    monkeypatch.setattr(psutil, "getloadavg", lambda: (0.5, 0.4, 0.3))
    # The third core is offline: psutil reads it as 0.0, and it is left out of the mean.
    monkeypatch.setattr(psutil, "cpu_freq", lambda percpu=False: [freq(2000.0, 0, 0), freq(3000.0, 0, 0), freq(0.0, 0, 0)])
    collector = sysstate.ProcCollector()
    assert collector.collect() == sysstate.CpuReading(load_avg_1m=0.5, cpu_mhz=2500.0)
    assert collector.notes == []


@pytest.mark.parametrize(
    "cpu_freq, said",
    [
        (lambda percpu=False: [], "reports no CPU frequency"),
        (lambda percpu=False: None, "reports no CPU frequency"),
        (_raise(NotImplementedError("can't find current frequency file")), "unreadable (NotImplementedError)"),
    ],
)
def test_proc_collector_without_a_frequency_notes_it_once(monkeypatch, cpu_freq, said):
    monkeypatch.setattr(psutil, "getloadavg", lambda: (0.5, 0.4, 0.3))
    monkeypatch.setattr(psutil, "cpu_freq", cpu_freq)
    collector = sysstate.ProcCollector()
    readings = [collector.collect() for _ in range(3)]
    assert readings == [sysstate.CpuReading(load_avg_1m=0.5, cpu_mhz=None)] * 3
    assert len(collector.notes) == 1 and said in collector.notes[0] and "CPU frequency not recorded" in collector.notes[0]


def test_proc_collector_without_a_load_average_is_unavailable_with_the_reason(monkeypatch):
    monkeypatch.setattr(psutil, "getloadavg", _raise(OSError("getloadavg failed")))
    cset = sysstate.CollectorSet([sysstate.ProcCollector()])
    assert cset.cpu is None
    assert any("proc unavailable (the load average is unreadable (OSError: getloadavg failed))" in n
               and "CPU load not recorded" in n for n in cset.notes)


class BrokenNvml:
    """A fake pynvml whose library is there but whose driver is not."""

    class NVMLError(Exception):
        pass

    def nvmlInit(self) -> None:
        raise self.NVMLError("Driver Not Loaded")


class FailingCollector:
    """A fake GPU collector that is available but breaks on every read."""

    name = "flaky"
    kind = "gpu"
    unavailable_reason = ""

    def __init__(self) -> None:
        self.calls = 0

    def available(self) -> bool:
        return True

    def collect(self) -> tuple[GpuSample, ...]:
        self.calls += 1
        raise OSError("device vanished")


def test_missing_gpu_collectors_degrade_to_one_note(tmp_path: Path):
    collectors = [
        sysstate.NvmlCollector(nvml=BrokenNvml()),
        sysstate.NvidiaSmiCollector(executable=str(tmp_path / "no-such-nvidia-smi")),
        sysstate.ProcCollector(),
    ]
    with sysstate.Sampler(interval_s=0.01, collectors=collectors) as sampler:
        time.sleep(0.2)
    snaps = sampler.snapshots
    assert len(snaps) >= 5
    assert all(s.gpus == () and s.source == "proc" for s in snaps)
    summary = sampler.summary()
    assert len(summary.notes) == 1
    (note,) = summary.notes
    assert "no GPU collector" in note and "Driver Not Loaded" in note and "not found" in note
    assert summary.sm_clock_mean_mhz is None and summary.throttled_fraction is None
    assert summary.load_avg_1m is not None


def test_a_collector_failing_every_second_is_noted_once():
    flaky = FailingCollector()
    with sysstate.Sampler(interval_s=0.01, collectors=[flaky, sysstate.ProcCollector()]) as sampler:
        time.sleep(0.2)
    assert flaky.calls >= 5
    assert len(sampler.notes) == 1 and "device vanished" in sampler.notes[0]


def test_nvidia_smi_is_used_when_nvml_is_missing(fake_smi):
    collectors = [
        sysstate.NvmlCollector(nvml=BrokenNvml()),
        sysstate.NvidiaSmiCollector(executable=fake_smi(0)),
    ]
    snap = sysstate.collect_snapshot(collectors)
    assert snap.source == "nvidia-smi" and len(snap.gpus) == gpu_count()
    cset = sysstate.CollectorSet(collectors)
    assert cset.notes == [f"using nvidia-smi for GPU state (nvml: {collectors[0].unavailable_reason})"]


def test_importing_sysstate_does_not_import_pynvml():
    code = (
        "import sys, perfbisect.measure.sysstate, perfbisect.measure.host, perfbisect.measure.versions, perfbisect.report.render; "
        "print('pynvml' in sys.modules, 'torch' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True,
        cwd=Path(__file__).resolve().parent.parent,
    )
    assert out.stdout.split() == ["False", "False"]


@pytest.mark.skipif(find_spec("pynvml") is not None, reason="pynvml is installed here")
def test_default_nvml_collector_says_why_without_pynvml():
    collector = sysstate.NvmlCollector()
    assert not collector.available()
    assert "not installed" in collector.unavailable_reason


# ---------------------------------------------------------------------------------------------
# Compact storage


def random_trial(n_snaps: int, n_gpus: int, seed: int = 3) -> list[SystemSnapshot]:
    rng = random.Random(seed)
    t0 = 1_764_500_000.0
    snaps = []
    for i in range(n_snaps):
        gpus = tuple(
            GpuSample(
                index=g, name="NVIDIA H200", sm_clock_mhz=rng.uniform(1245, 1980), mem_clock_mhz=3201.0,
                sm_clock_max_mhz=1980.0, mem_clock_max_mhz=3201.0, temperature_c=rng.uniform(40, 80),
                power_w=rng.uniform(100, 700), power_limit_w=700.0, pstate="P0",
                throttle_reasons=rng.choice([0, 1, 4, 4 | 0x20]), pcie_gen=5, pcie_width=16,
                memory_used_mib=rng.uniform(0, 140000), memory_total_mib=143771.0,
                utilization_pct=float(rng.randint(0, 100)), ecc_errors=None if g == 7 else 0,
                processes=(1000 + g,) if rng.random() < 0.9 else (),
            )
            for g in range(n_gpus)
        )
        snaps.append(SystemSnapshot(
            t=t0 + i + rng.uniform(0, 0.05), gpus=gpus, load_avg_1m=rng.uniform(0, 8),
            cpu_mhz=rng.uniform(1500, 3500), source="nvml+proc",
        ))
    return snaps


def rounded(s: SystemSnapshot) -> SystemSnapshot:
    def r(x: float | None, d: int) -> float | None:
        return None if x is None else (round(x) if d == 0 else round(x, d))

    return SystemSnapshot(
        t=round(s.t, 3), load_avg_1m=r(s.load_avg_1m, 2), cpu_mhz=r(s.cpu_mhz, 0), source=s.source,
        gpus=tuple(
            GpuSample(**{
                **g.__dict__,
                "sm_clock_mhz": r(g.sm_clock_mhz, 0), "mem_clock_mhz": r(g.mem_clock_mhz, 0),
                "sm_clock_max_mhz": r(g.sm_clock_max_mhz, 0), "mem_clock_max_mhz": r(g.mem_clock_max_mhz, 0),
                "temperature_c": r(g.temperature_c, 0), "power_w": r(g.power_w, 1),
                "power_limit_w": r(g.power_limit_w, 1), "memory_used_mib": r(g.memory_used_mib, 0),
                "memory_total_mib": r(g.memory_total_mib, 0), "utilization_pct": r(g.utilization_pct, 0),
            })
            for g in s.gpus
        ),
    )


def test_compact_ten_minutes_of_eight_gpus_is_under_one_megabyte_and_round_trips():
    snaps = random_trial(600, 8)
    data = compact(snaps)
    blob = json.dumps(data, separators=(",", ":"))
    assert len(blob.encode()) < 1_000_000
    back = expand_compact(json.loads(blob))
    assert len(back) == 600
    for original, restored in zip(snaps, back):
        want = rounded(original)
        assert restored.t == pytest.approx(want.t, abs=1e-3)
        assert restored.gpus == want.gpus
        assert (restored.load_avg_1m, restored.cpu_mhz, restored.source) == (want.load_avg_1m, want.cpu_mhz, want.source)
    assert compact(back) == data


def test_compact_keeps_gaps_where_a_gpu_was_not_read():
    snaps = random_trial(5, 2)
    snaps[2] = SystemSnapshot(t=snaps[2].t, gpus=(), source="proc")  # the GPU collector failed here
    back = expand_compact(compact(snaps))
    assert [len(s.gpus) for s in back] == [2, 2, 0, 2, 2]
    assert back[2].source == "proc"
    assert expand_compact(compact([])) == []


def test_compact_of_the_real_capture_round_trips():
    snaps = [SystemSnapshot(t=s["t"], gpus=nvml_at(i).collect(), source="nvml") for i, s in enumerate(SAMPLES)]
    back = expand_compact(compact(snaps))
    assert [rounded(s).gpus for s in snaps] == [s.gpus for s in back]


# ---------------------------------------------------------------------------------------------
# Busy machine, teardown, fingerprint


@pytest.fixture
def processes_here(monkeypatch):
    """psutil's view of this machine's processes, edited: ``{pid: name}`` runs, ``{pid: None}`` is gone.

    The captures' pids are another machine's; here they may be gone or an unrelated process.
    """
    here: dict[int, str | None] = {}
    real = psutil.Process

    def process(pid: int | None = None) -> Any:
        if pid not in here:
            return real(pid)
        if here[pid] is None:
            raise psutil.NoSuchProcess(pid)
        return SimpleNamespace(pid=pid, name=lambda: here[pid])

    monkeypatch.setattr(psutil, "Process", process)
    return here


def test_busy_processes_from_the_nvml_capture(processes_here):
    load = phase_indices("load")[0]
    processes_here[LIVE["load_pid"]] = None
    busy = gpu_busy_processes(collectors=[nvml_at(load)])
    assert (0, LIVE["load_pid"], "") in busy
    others = gpu_busy_processes(exclude_pids=[LIVE["load_pid"]], collectors=[nvml_at(load)])
    assert LIVE["load_pid"] not in {pid for _, pid, _ in others}


def test_busy_process_names_come_from_psutil_or_nvidia_smi(fake_smi, processes_here):
    load = phase_indices("load")[0]
    pid = LIVE["load_pid"]
    processes_here[pid] = None
    busy = gpu_busy_processes(collectors=[sysstate.NvidiaSmiCollector(fake_smi(load))])
    smi_name = next(p.name for p in sysstate.parse_smi_apps_csv(
        SMI_DUMP["samples"][load]["apps"]["stdout"],
        {r.uuid: r.sample.index for r in sysstate.parse_smi_gpu_csv(SMI_DUMP["samples"][load]["gpu"]["stdout"])},
    ) if p.pid == pid)
    assert (0, pid, smi_name) in busy
    processes_here[pid] = "sglang-worker"
    busy = gpu_busy_processes(collectors=[nvml_at(load)])
    assert (0, pid, "sglang-worker") in busy


def test_process_names_are_this_machines():
    child = subprocess.Popen(["sleep", "30"])
    try:
        assert _process_name(child.pid) == "sleep"
    finally:
        child.kill()
        child.wait()
    pid_max = int(Path("/proc/sys/kernel/pid_max").read_text()) if Path("/proc/sys/kernel/pid_max").exists() else 2**22
    assert _process_name(pid_max + 1) == ""  # no such process: no name, no error


def test_wait_until_idle_refuses_a_busy_gpu_with_the_fix():
    load = phase_indices("load")[0]
    seen: list[Any] = []
    with pytest.raises(MachineBusy) as err:
        wait_until_idle(
            timeout_s=0.25, poll_s=0.1, progress=lambda busy, waited: seen.append((busy, waited)),
            collectors=[nvml_at(load)],
        )
    message = str(err.value)
    assert f"pid {LIVE['load_pid']}" in message and "GPU 0" in message
    assert "--wait-idle" in message and "kill" in message
    assert len(seen) >= 2 and seen[0][0][0][1] == LIVE["load_pid"]


def test_wait_until_idle_returns_at_once_on_an_idle_gpu():
    # The idle capture shows no compute process (the load starts after it).
    idle = phase_indices("idle")[0]
    assert gpu_busy_processes(collectors=[nvml_at(idle)]) == []
    busy_reports: list[Any] = []
    waited = wait_until_idle(timeout_s=5, poll_s=1, progress=lambda *a: busy_reports.append(a), collectors=[nvml_at(idle)])
    assert busy_reports == [] and waited >= 0  # one check, found idle: never reported busy, never slept
    assert wait_until_idle(timeout_s=0, collectors=[sysstate.ProcCollector()]) >= 0  # no GPU collector: nothing to wait for


def test_gpu_memory_released_compares_with_the_baseline():
    idle, load = phase_indices("idle")[0], phase_indices("load")[0]
    fake = FakeNvmlFromFixture(NVML_DUMP, idle)
    collectors = [sysstate.NvmlCollector(nvml=fake)]
    baseline = gpu_memory_used_mib(collectors)
    assert set(baseline) == set(range(gpu_count()))
    released = gpu_memory_released(baseline, tolerance_mib=256, collectors=collectors)
    assert released()
    fake.select(load)  # the matmul process holds gigabytes
    assert not released()
    total = sum(baseline.values())
    assert not gpu_memory_released(total, 256, collectors)()
    fake.select(idle)
    assert gpu_memory_released(total, 256, collectors)()
    assert gpu_memory_released({}, 0, [sysstate.ProcCollector()])()


def test_host_fingerprint_names_gpu_count_model_and_driver():
    fp = host_fingerprint([nvml_at(0)])
    name = raw(SAMPLES[0], "nvmlDeviceGetName", 0)
    driver = raw(SAMPLES[0], "nvmlSystemGetDriverVersion", None)
    assert fp.startswith(f"{gpu_count()}x{name.replace(' ', '-')}-drv{driver}-")
    assert fp == host_fingerprint([nvml_at(len(SAMPLES) - 1)])  # stable under load
    nogpu = host_fingerprint([sysstate.ProcCollector()])
    assert nogpu.startswith("nogpu-") and nogpu == host_fingerprint([sysstate.ProcCollector()])


# ---------------------------------------------------------------------------------------------
# Versions from the target's interpreter


def test_target_versions_of_this_python():
    versions = target_versions(sys.executable, collectors=[sysstate.ProcCollector()])
    assert versions["python"] == platform.python_version()
    for package in ("torch", "sglang", "transformers"):
        assert (package in versions) == (find_spec(package) is not None)
    assert all(isinstance(v, str) and v for v in versions.values())
    assert "driver" not in versions  # no GPU collector given


def test_the_versions_probe_sees_the_working_directory_not_perfbisects_folder(tmp_path: Path):
    # The probe runs by path, which would put perfbisect/ (bisect.py, config.py, ...) first on the
    # target's sys.path; it puts the working directory there instead, as `python -c` did.
    meta = tmp_path / "sglang-9.9.dist-info"
    meta.mkdir()
    (meta / "METADATA").write_text("Metadata-Version: 2.1\nName: sglang\nVersion: 9.9\n")
    versions = target_versions(sys.executable, cwd=tmp_path, collectors=[sysstate.ProcCollector()])
    assert versions["sglang"] == "9.9"


def test_target_versions_adds_the_driver_from_the_gpu_collector(tmp_path: Path):
    versions = target_versions(sys.executable, cwd=tmp_path, collectors=[nvml_at(0)])
    assert versions["driver"] == raw(SAMPLES[0], "nvmlSystemGetDriverVersion", None)
    assert versions["cuda_driver"]


def test_versions_captured_on_the_h200_and_nccl_needs_no_cuda_context():
    captured = load_fixture("target-versions.json")
    versions = captured["target_versions"]
    assert {"python", "torch", "cuda", "nccl", "driver", "cuda_driver"} <= set(versions)
    assert versions["nccl_source"] == "torch"
    assert "sglang" not in versions  # not installed there: no entry, no error
    assert versions["driver"] == raw(SAMPLES[0], "nvmlSystemGetDriverVersion", None)
    # torch.cuda.nccl.version() was called in a process that NVML then did not list on the GPU.
    check = captured["nccl_context_check"]
    assert check["nccl"] == versions["nccl"]
    assert check["own_pid_holds_gpu_context"] is False and check["torch_cuda_initialized_after"] is False


def test_target_versions_with_a_missing_interpreter_says_how_to_fix_it(tmp_path: Path):
    missing = str(tmp_path / "venv" / "bin" / "python")
    with pytest.raises(ConfigError) as err:
        target_versions(missing)
    assert missing in str(err.value) and "[target] python" in str(err.value)


def test_target_versions_with_a_broken_interpreter(tmp_path: Path):
    broken = tmp_path / "python"
    broken.write_text("#!/bin/sh\necho 'this is not python' >&2\nexit 3\n")
    broken.chmod(0o755)
    with pytest.raises(ConfigError, match="exit 3.*not python"):
        target_versions(str(broken))


# ---------------------------------------------------------------------------------------------
# Formatting


def test_format_snapshot_lines_show_clocks_and_throttle_reasons():
    load = phase_indices("load")[0]
    snap = SystemSnapshot(t=SAMPLES[load]["t"], gpus=nvml_at(load).collect(), load_avg_1m=1.5, cpu_mhz=2500.0, source="nvml+proc")
    lines = format_snapshot(snap)
    assert len(lines) == 1 + gpu_count()
    assert "[nvml+proc]" in lines[0] and "load 1.50" in lines[0]
    g = snap.gpus[0]
    assert lines[1].startswith(f"  GPU0 {g.name}: SM {g.sm_clock_mhz:.0f}/{g.sm_clock_max_mhz:.0f} MHz")
    for reason in sysstate.throttle_reason_names(g.throttle_reasons) or ["none"]:
        assert reason in lines[1]
    assert f"pids {LIVE['load_pid']}" in lines[1]
    assert format_snapshot(SystemSnapshot(t=0.0))[1] == "  no GPU readings"


def _real_nvml_gpus() -> int:
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            return pynvml.nvmlDeviceGetCount()
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001 - any failure means: no usable GPU here
        return 0


REAL_GPUS = _real_nvml_gpus()
real_gpu = pytest.mark.skipif(REAL_GPUS == 0, reason="needs an NVIDIA GPU with NVML (nvidia-ml-py)")


@pytest.mark.gpu
@real_gpu
def test_real_nvml_collector_reads_sane_values():
    collector = sysstate.NvmlCollector()
    assert collector.available(), collector.unavailable_reason
    gpus = collector.collect()
    assert len(gpus) == REAL_GPUS
    for g in gpus:
        assert "NVIDIA" in g.name
        assert 0 < g.sm_clock_mhz <= g.sm_clock_max_mhz
        assert g.memory_total_mib > 1000 and 0 <= g.memory_used_mib <= g.memory_total_mib
        assert g.pstate and g.pstate.startswith("P")
        assert g.throttle_reasons is not None and g.temperature_c > 0
        assert g.power_w > 0 and g.power_limit_w > 0
    assert collector.driver_version()
    collector.close()


@pytest.mark.gpu
@real_gpu
def test_real_nvidia_smi_agrees_with_nvml():
    smi = sysstate.NvidiaSmiCollector()
    if not smi.available():
        pytest.skip(smi.unavailable_reason)
    nvml = sysstate.NvmlCollector()
    a, b = nvml.collect(), smi.collect()
    assert [g.name for g in a] == [g.name for g in b]
    assert [g.memory_total_mib for g in a] == pytest.approx([g.memory_total_mib for g in b], abs=1)
    assert nvml.driver_version() == smi.driver_version()
    nvml.close()


@pytest.mark.gpu
@real_gpu
def test_real_sampler_and_snapshot():
    with sysstate.Sampler(interval_s=0.2) as sampler:
        time.sleep(1.1)
    snaps = sampler.snapshots
    assert len(snaps) >= 5 and snaps[0].source == "nvml+proc"
    summary = sampler.summary()
    assert summary.sm_clock_mean_mhz and summary.throttled_fraction is not None
    assert summary.notes == ()
    assert format_snapshot(snaps[-1])[1].startswith("  GPU0 NVIDIA")


@pytest.mark.gpu
@real_gpu
def test_real_versions_fingerprint_and_teardown_check():
    versions = target_versions(sys.executable)
    assert versions["driver"] and versions["cuda_driver"]
    if find_spec("torch") is not None:
        assert versions["torch"] and versions["cuda"]
    name = sysstate.collect_snapshot().gpus[0].name
    assert name.replace(" ", "-") in host_fingerprint()
    baseline = gpu_memory_used_mib()
    assert len(baseline) == REAL_GPUS
    assert gpu_memory_released(baseline, tolerance_mib=1024)()
    assert all(pid != os.getpid() for _, pid, _ in gpu_busy_processes())


class ProcessListCollector:
    """A GPU collector whose one GPU lists the pids it is given (the processes are real)."""

    name = "pids"
    kind = "gpu"

    def __init__(self, pids: list[int]) -> None:
        self.pids = pids
        self.notes: list[str] = []

    def available(self) -> bool:
        return True

    def collect(self) -> tuple[GpuSample, ...]:
        return (GpuSample(index=0, name="listed", processes=tuple(self.pids)),)

    def processes(self) -> list[sysstate.GpuProcess]:
        return []

    def driver_version(self) -> str | None:
        return None

    def close(self) -> None:
        pass


def test_own_children_on_the_gpu_are_not_other_processes_even_after_they_exit():
    # A server perfbisect started (its own process group) is on the GPU while the trial runs; the
    # summary is taken after teardown, when the parentage can no longer be read. It must not be
    # reported as another process (that would flag every trial as contended).
    import subprocess
    import sys

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], start_new_session=True)
    stranger = 1  # init: on the "GPU" too, and not ours
    try:
        with sysstate.Sampler(interval_s=0.01, collectors=[ProcessListCollector([child.pid, stranger])]) as sampler:
            deadline = time.monotonic() + 5
            while len(sampler.snapshots) < 3 and time.monotonic() < deadline:
                time.sleep(0.01)
    finally:
        child.kill()
        child.wait()
    summary = sampler.summary()
    assert child.pid not in summary.other_gpu_processes
    assert stranger in summary.other_gpu_processes
    assert sysstate.descends_from(os.getpid(), os.getpid())
    assert not sysstate.descends_from(stranger, os.getpid())
