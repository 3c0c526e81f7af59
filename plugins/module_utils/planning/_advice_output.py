# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Private module utils of gpufleet.mig: the interface may change at any time.

"""The layout advisor's answer (:class:`Advice`): what became of every request, the replay's verdict on the current
catalog, the best single layout and the advised schedule, and the catalog and AWX switches to write.

Pure Python: no NVML, no Ansible.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import statistics
from dataclasses import dataclass
from typing import Dict, Tuple


# A GPU layout of one whole GPU, MIG disabled: what serves nvidia.com/gpu on a node of the mixed strategy.
MIG_DISABLED = 'mig-disabled'
ADVISED_PREFIX = 'advised-'
TITLES = (('current', 'current catalog'), ('single', 'best single layout'), ('schedule', 'advised schedule'))


@dataclass(frozen=True)
class Judgement:
    """How the candidates were judged: the rollout a switch costs (_advice_replay.Rollout) on ``hosts`` hosts, the
    least gain a switch must bring (a share), the requests' patience, the requests replayed, and the switch hours of
    the schedule candidate (none where it found no switch worth making)."""
    rollout: object
    hosts: int
    min_gain: float
    patience_minutes: float
    replayed: int
    host_share: float = 1.0
    schedule_hours: Tuple[int, ...] = ()


@dataclass(frozen=True)
class Advice:
    """The fleet's advice: one ModelAdvice per model (the chosen candidate's), what became of every request read
    (_advice_demand.Tally), the replay's Outcome of each candidate (``outcomes``: current, single, schedule), the
    ``choice`` (single or schedule) and how it was judged."""
    models: tuple
    fleets: tuple
    tally: object
    outcomes: Dict[str, object]
    choice: str
    judgement: Judgement

    def keep_current(self):
        """Whether the current catalog places at least as many requests as the choice: then nothing is worth a change."""
        return self.outcomes['current'].placed() >= self.outcomes[self.choice].placed()

    def gains(self, label):
        """Per day of the window, the requests ``label`` places more than the current catalog."""
        return [a - c for a, c in zip(self.outcomes[label].placed_by_day, self.outcomes['current'].placed_by_day)]

    def verdict(self):
        single, schedule = self.outcomes['single'].placed(), self.outcomes['schedule'].placed()
        share = (float(schedule) / single - 1.0) * 100.0 if single else 0.0
        if self.keep_current():
            return ('advice: keep the current catalog; neither the best single layout nor the schedule places more '
                    'requests in the replay (no file is worth writing)')
        if self.choice == 'schedule':
            return ('advice: the schedule, switching at %s: it places %+.1f %% against the best single layout, more '
                    'than the %g %% a switch must bring' % (self._hours(), share, self.judgement.min_gain * 100.0))
        if not self.judgement.schedule_hours:
            return 'advice: the best single layout; no switch places more in the fluid model'
        return ('advice: the best single layout; the schedule switching at %s places %+.1f %% against it, not more than '
                'the %g %% a switch must bring' % (self._hours(), share, self.judgement.min_gain * 100.0))

    def _hours(self):
        return ', '.join('%02d:00' % h for h in self.judgement.schedule_hours)

    def summary(self):
        """What became of every request read, then the replay's placed and unplaced requests for each candidate and
        the verdict: lines whose figures add up to the requests read and replayed."""
        judgement = self.judgement
        lines = self.tally.lines()
        sampled = '' if judgement.host_share >= 1 else (' (a sample: %.1f %% of the hosts and of the requests)'
                                                        % (judgement.host_share * 100.0))
        lines.append('replayed: %d whole requests over %d days%s, %g min patience; %s'
                     % (judgement.replayed, len(self.outcomes['current'].placed_by_day), sampled, judgement.patience_minutes,
                        judgement.rollout.describe(judgement.hosts)))
        for label, title in TITLES:
            outcome = self.outcomes[label]
            gains = self.gains(label)
            if label == 'schedule':
                title += ' (%s)' % ('switches at ' + self._hours() if judgement.schedule_hours else 'no switch')
            lines.append('%s: placed %d, unplaced %d%s' % (
                title, outcome.placed(), outcome.unplaced(), '' if label == 'current' else
                ', gain over the current catalog a day min/median/max %+d/%+g/%+d' % (min(gains), statistics.median(gains), max(gains))))
        lines.append(self.verdict())
        return lines

    def switch_hours(self):
        return sorted(set(hour for advice in self.models for hour, dummy in advice.periods))

    def layout_name(self, hour):
        return '%s%02d00' % (ADVISED_PREFIX, hour)

    def configs(self):
        """The advised mig-configs (mig-parted v1): one layout per switch hour, each with every model's layout in
        force from then; an entry per model and GPU layout (device-filter: the model's PCI id, devices: the device
        indices that take it), keyed by the model's own profile names, as mig-parted reads them."""
        fleets = dict((f.model, f) for f in self.fleets)
        configs = {}
        for hour in self.switch_hours():
            entries = []
            for advice in self.models:
                fleet = fleets[advice.model]
                layout = [lay for start, lay in advice.periods if start <= hour]
                layout = layout[-1] if layout else advice.periods[-1][1]
                entries.extend(_entries(fleet, layout))
            configs[self.layout_name(hour)] = entries
        return configs

    def document(self):
        return {'version': 'v1', 'mig-configs': self.configs()}

    def awx_switches(self):
        """awx_layout_switches of playbooks/vars/awx.yml: one {layout, time, timezone} per switch hour; the hours are
        those of the samples, UTC, whatever awx_schedule_timezone says."""
        return [{'layout': self.layout_name(hour), 'time': '%02d:00' % hour, 'timezone': 'UTC'} for hour in self.switch_hours()]

    def as_dict(self):
        replayed = dict((label, {'placed': self.outcomes[label].placed(), 'unplaced': self.outcomes[label].unplaced(),
                                 'placed_by_day': list(self.outcomes[label].placed_by_day)}) for label, dummy in TITLES)
        return {'models': [m.as_dict() for m in self.models], 'switch_hours': self.switch_hours(),
                'requests': self.tally.as_dict(), 'replayed': replayed, 'choice': self.choice,
                'keep_current': self.keep_current(), 'summary': self.summary(),
                'awx_layout_switches': self.awx_switches(), 'catalog': self.document()}


def _entries(fleet, layout):
    by_slot = {}
    for index, slot in zip(fleet.device_indices(), layout.slots):
        by_slot.setdefault(slot, []).append(index)
    entries = []
    for slot in sorted(by_slot, key=lambda s: by_slot[s]):
        entry = {'device-filter': [fleet.gpu.pci_device_id], 'devices': 'all' if len(by_slot) == 1 else by_slot[slot]}
        if slot == ((MIG_DISABLED, 1),):
            entry['mig-enabled'] = False
        else:
            entry['mig-enabled'] = True
            # the model's own profile names, which mig-parted reads (it rejects gpufleet's model-agnostic 1g, 1g.2mem)
            entry['mig-devices'] = dict(slot)
        entries.append(entry)
    return entries
