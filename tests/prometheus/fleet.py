# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Simulated hosts whose metrics the collection's own code writes, as promtool input series over time.

    SimulatedFleet(directory, run_module, monkeypatch)   .host(name, gpus) -> FleetHost
    FleetHost   .apply(layout), .decide(layout) (nvidia_mig_layout in-process, as the role calls it),
                .refresh() (the metrics timer's command), .edit_state(change), .metrics()
    Timeline(minutes, step)   .show(host, minute, exposition): what node_exporter serves from that minute on;
                .input_series(): promtool's input_series of a scrape every ``step`` minutes, with the stranded
                slice-seconds counter advanced at each scrape by the metrics code's own accumulate_stranded, and
                node_exporter's node_textfile_mtime_seconds of a file the timer keeps refreshing
    shipped_catalog(), shipped_rules()   the role's layout catalog; the rules of the shipped rule file
    parse_exposition(text)   [(name, {label: value}, value)] of a textfile (comments skipped)
    promtool_values(values)  one series' values per step (None: not scraped) in promtool's notation
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import json
import os
import re

import yaml

from ansible_collections.gpufleet.mig.plugins.module_utils.host import _boot_entry
from ansible_collections.gpufleet.mig.plugins.module_utils.host._host_files import METRICS_FILE
from ansible_collections.gpufleet.mig.plugins.module_utils.host._layout_metrics import accumulate_stranded
from ansible_collections.gpufleet.mig.plugins.modules import nvidia_mig_layout
from ansible_collections.gpufleet.mig.tests.support.simulator import SIMULATOR_ENV

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))
CATALOG = os.path.join(REPO, 'roles', 'mig_layout', 'files', 'catalog.yml')
RULES = os.path.join(REPO, 'roles', 'mig_layout', 'files', 'prometheus', 'gpufleet-mig.rules.yml')
STEP_SECONDS = 60   # a minute: the metrics timer's period
COUNTER = 'gpufleet_mig_stranded_slice_seconds_total'
STRANDED = 'gpufleet_mig_stranded_slices'
TEXTFILE_DIR = '/var/lib/prometheus/node-exporter'   # Debian's node_exporter textfile folder

_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def shipped_catalog():
    """mig-configs of the catalog the role ships."""
    with open(CATALOG) as handle:
        return yaml.safe_load(handle)['mig-configs']


def shipped_rules():
    """Every rule of the shipped rule file, alerts and recording rules, in order."""
    with open(RULES) as handle:
        return [rule for group in yaml.safe_load(handle)['groups'] for rule in group['rules']]


def parse_exposition(text):
    """[(name, {label: value}, float value)] of a Prometheus text exposition; comments skipped."""
    samples = []
    for line in text.splitlines():
        if not line or line.startswith('#'):
            continue
        match = _SAMPLE.match(line)
        if not match:
            raise ValueError('not a sample line: %r' % line)
        labels = dict((key, re.sub(r'\\(.)', lambda m: {'n': '\n'}.get(m.group(1), m.group(1)), value))
                      for key, value in _LABEL.findall(match.group(2) or ''))
        samples.append((match.group(1), labels, float(match.group(3))))
    return samples


def _number(value):
    return str(int(value)) if value == int(value) else repr(value)


def promtool_values(values):
    """promtool's notation of one series' values, one per step: runs as ``a+bxn`` (n+1 values), a series gone
    from the scrape as ``stale`` (what Prometheus records then), later steps without it as ``_``."""
    tokens = []
    i = 0
    while i < len(values):
        if values[i] is None:
            j = i
            while j < len(values) and values[j] is None:
                j += 1
            missing = j - i
            if i > 0:
                tokens.append('stale')
                missing -= 1
            if missing:
                tokens.append('_x%d' % missing if missing > 1 else '_')
            i = j
            continue
        j = i + 1
        step = values[j] - values[i] if j < len(values) and values[j] is not None else 0
        while j < len(values) and values[j] is not None and values[j] - values[j - 1] == step:
            j += 1
        count = j - i - 1
        if count == 0:
            tokens.append(_number(values[i]))
        elif step == 0:
            tokens.append('%sx%d' % (_number(values[i]), count))
        else:
            tokens.append('%s%s%sx%d' % (_number(values[i]), '+' if step > 0 else '-', _number(abs(step)), count))
        i = j
    return ' '.join(tokens)


def series_name(name, labels):
    return '%s{%s}' % (name, ','.join('%s=%s' % (key, json.dumps(labels[key])) for key in sorted(labels)))


class FleetHost(object):
    """One simulated host: its state file, the folders nvidia_mig_layout keeps, the module run in-process."""

    def __init__(self, fleet, name, gpus):
        self.fleet = fleet
        self.name = name
        self.root = os.path.join(fleet.directory, name)
        os.makedirs(self.root)
        self.state = os.path.join(self.root, 'gpus.json')
        with open(self.state, 'w') as handle:
            json.dump({'driver_version': '580.95.05', 'gpus': gpus, 'faults': []}, handle)
        self.paths = dict((key, os.path.join(self.root, *folder.split('/'))) for key, folder in (
            ('config_dir', 'etc/gpufleet-mig'), ('lib_dir', 'usr/local/lib/gpufleet-mig'), ('bin_dir', 'usr/local/sbin'),
            ('systemd_dir', 'etc/systemd/system'), ('metrics_dir', 'metrics')))

    def _module(self, layout, apply):
        args = dict(self.paths, systemd=False, name=layout, config=self.fleet.catalog, apply=apply)
        with self.fleet.monkeypatch.context() as patch:
            patch.setenv(SIMULATOR_ENV, self.state)
            result, failed = self.fleet.run_module(nvidia_mig_layout.main, args)
        if failed:
            raise AssertionError('%s: nvidia_mig_layout %s failed: %s' % (self.name, layout, result.get('msg')))
        return result

    def apply(self, layout):
        """The role's apply of a shipped layout: the host converges and its metrics say so."""
        return self._module(layout, apply=True)

    def decide(self, layout):
        """The role's decision before a change: the new layout declared, no GPU changed yet."""
        return self._module(layout, apply=False)

    def refresh(self):
        """What gpufleet-mig-metrics.timer runs every minute."""
        argv = ['metrics', '--layout', os.path.join(self.paths['config_dir'], 'layout.json'),
                '--metrics-dir', self.paths['metrics_dir'], '--lock-timeout', '5']
        with self.fleet.monkeypatch.context() as patch:
            patch.setenv(SIMULATOR_ENV, self.state)
            assert _boot_entry.main(argv) == 0, '%s: the metrics refresh failed' % self.name

    def edit_state(self, change):
        """Change the simulated GPUs behind gpufleet.mig's back: ``change(state)`` edits the state dict."""
        with open(self.state) as handle:
            state = json.load(handle)
        change(state)
        with open(self.state, 'w') as handle:
            json.dump(state, handle)

    def metrics(self):
        with open(os.path.join(self.paths['metrics_dir'], METRICS_FILE)) as handle:
            return handle.read()


class SimulatedFleet(object):
    """Simulated hosts, each run through the collection's module with the shipped catalog."""

    def __init__(self, directory, run_module, monkeypatch):
        self.directory = str(directory)
        self.run_module = run_module
        self.monkeypatch = monkeypatch
        self.catalog = shipped_catalog()

    def host(self, name, gpus):
        return FleetHost(self, name, copy.deepcopy(gpus))


class Timeline(object):
    """What Prometheus would have scraped every ``step`` minutes from hosts whose metrics change at given minutes."""

    def __init__(self, minutes, step=1):
        self.step = step
        self.steps = minutes // step + 1
        self.shown = {}   # host -> {minute: exposition text}

    def show(self, host, minute, exposition):
        assert minute % self.step == 0, 'a change at minute %d between scrapes' % minute
        self.shown.setdefault(host, {})[minute] = exposition

    def input_series(self, directory):
        """promtool input_series of every host (instance "<host>:9100", job "node"). ``directory``: where the
        stranded slice-seconds are kept while they are accumulated scrape by scrape."""
        values = {}
        for host in sorted(self.shown):
            scrape = {'instance': '%s:9100' % host, 'job': 'node'}
            minutes = sorted(self.shown[host])
            counters = {}
            stranded = [None] * self.steps
            for index, minute in enumerate(minutes):
                first = minute // self.step
                last = minutes[index + 1] // self.step if index + 1 < len(minutes) else self.steps
                gauges = {}
                for name, labels, value in parse_exposition(self.shown[host][minute]):
                    key = series_name(name, dict(labels, **scrape))
                    if name == COUNTER:
                        counters[key] = labels['uuid']
                        continue
                    if name == STRANDED:
                        gauges[labels['uuid']] = int(value)
                    values.setdefault(key, [None] * self.steps)[first:last] = [value] * (last - first)
                stranded[first:last] = [gauges] * (last - first)
            # Each scrape sees what the timer wrote at that minute: the metrics code's own accumulation.
            totals_file = os.path.join(str(directory), '%s-stranded.json' % host)
            for key in counters:
                values[key] = [None] * self.steps
            for step in range(minutes[0] // self.step, self.steps):
                totals = accumulate_stranded(totals_file, stranded[step], float(step * self.step * STEP_SECONDS))
                for key, uuid in counters.items():
                    values[key][step] = totals.get(uuid)
            mtime = series_name('node_textfile_mtime_seconds', dict(scrape, file='%s/%s' % (TEXTFILE_DIR, METRICS_FILE)))
            values[mtime] = [None] * (minutes[0] // self.step) + [
                float(step * self.step * STEP_SECONDS) for step in range(minutes[0] // self.step, self.steps)]
        return [{'series': key, 'values': promtool_values(values[key])} for key in sorted(values)]
