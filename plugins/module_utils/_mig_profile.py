# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Private module utils of gpufleet.mig: the interface may change at any time.

"""MIG profile names in the mig-parted grammar ``[<C>c.]<G>g.<GB>gb[+me]``.

Pure Python: no NVML, no Ansible imports. Names only describe a profile; which
profiles exist on a GPU, their ids and placements always come from NVML.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

_PROFILE_RE = re.compile(r'^(?:(?P<c>[1-9][0-9]*)c\.)?(?P<g>[1-9][0-9]*)g\.(?P<gb>[1-9][0-9]*)gb(?P<me>\+me)?$')

# What NVML prefixes every GPU/compute instance profile name with.
_NVML_NAME_PREFIX = 'MIG '


class ProfileError(ValueError):
    """A profile name that does not follow the grammar."""


class MigProfile(object):
    """One parsed profile name.

    ``compute_slices`` is the size of the compute instance (C); for a GPU
    instance profile or a full-size compute instance it equals ``gpu_slices``.
    """

    __slots__ = ('compute_slices', 'gpu_slices', 'memory_gb', 'media_extensions')

    def __init__(self, compute_slices, gpu_slices, memory_gb, media_extensions=False):
        self.compute_slices = compute_slices
        self.gpu_slices = gpu_slices
        self.memory_gb = memory_gb
        self.media_extensions = media_extensions

    @classmethod
    def parse(cls, name):
        if not isinstance(name, str):
            raise ProfileError('MIG profile must be a string, got %r' % (name,))
        text = name.strip()
        if text.startswith(_NVML_NAME_PREFIX):
            text = text[len(_NVML_NAME_PREFIX):]
        match = _PROFILE_RE.match(text)
        if not match:
            raise ProfileError(
                "invalid MIG profile %r: expected [<C>c.]<G>g.<GB>gb[+me], e.g. '3g.40gb' or '1c.3g.40gb'" % (name,))
        gpu_slices = int(match.group('g'))
        compute_slices = int(match.group('c')) if match.group('c') else gpu_slices
        if compute_slices > gpu_slices:
            raise ProfileError('invalid MIG profile %r: %dc is larger than its %dg GPU instance'
                               % (name, compute_slices, gpu_slices))
        return cls(compute_slices, gpu_slices, int(match.group('gb')), bool(match.group('me')))

    @property
    def is_compute_instance_profile(self):
        """True for a ``<C>c.`` key smaller than its GPU instance."""
        return self.compute_slices != self.gpu_slices

    @property
    def gpu_instance_name(self):
        """The GPU instance profile this profile lives in, e.g. ``3g.40gb``."""
        return '%dg.%dgb%s' % (self.gpu_slices, self.memory_gb, '+me' if self.media_extensions else '')

    @property
    def name(self):
        if self.is_compute_instance_profile:
            return '%dc.%s' % (self.compute_slices, self.gpu_instance_name)
        return self.gpu_instance_name

    def __eq__(self, other):
        return isinstance(other, MigProfile) and self.name == other.name

    def __ne__(self, other):
        return not self.__eq__(other)

    def __hash__(self):
        return hash(self.name)

    def __repr__(self):
        return 'MigProfile(%r)' % self.name

    def __str__(self):
        return self.name


def compute_instance_name(ci_slices, gpu_instance_name):
    """Name of a compute instance of ``ci_slices`` inside ``gpu_instance_name``."""
    gi = MigProfile.parse(gpu_instance_name)
    return MigProfile(ci_slices, gi.gpu_slices, gi.memory_gb, gi.media_extensions).name
