"""asv-style view of the workload suite: one `time_<candidate>` per candidate, per workload.

Usable with airspeed velocity or any runner that calls ``setup(workload)`` then ``time_*``.
"""

from synet import benchmarks

_WORKLOADS = {w.name: w for w in benchmarks.all_workloads()}


class TimeWorkloads:
    params = [sorted(_WORKLOADS)]
    param_names = ["workload"]

    def setup(self, workload):
        made = _WORKLOADS[workload].make()   # candidates, or (candidates, meta)
        self.candidates = made[0] if isinstance(made, tuple) else made
        for fn in self.candidates.values():
            fn()  # warm-up

    def time_synet(self, workload):
        self.candidates["synet"]()

    def time_synet_2_threads(self, workload):
        self.candidates["synet x2"]()

    def time_numpy(self, workload):
        for label, fn in self.candidates.items():
            if label.startswith("numpy") or label.startswith("ml_dtypes"):
                fn()
                return
        raise NotImplementedError  # asv: skip
