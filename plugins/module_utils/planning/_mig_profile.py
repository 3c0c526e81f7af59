# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Private module utils of gpufleet.mig: the interface may change at any time.

"""MIG profile names: mig-parted's memory-sized grammar and gpufleet's model-agnostic shapes.

Memory-sized (mig-parted, go-nvlib): ``[<C>c.]<G>g.<GB>gb[+me|+me.all|-me|+gfx]``, e.g.
``3g.40gb``, ``1c.3g.40gb``, ``1g.24gb+gfx``. NVML names every profile this way.

Model-agnostic (gpufleet.mig): ``[<C>c.]<G>g[.<M>mem][+me|+me.all|-me|+gfx]``, e.g. ``1g``,
``1g.2mem``, ``3g``, ``1c.3g``, ``1g+gfx``: an instance named by its shape (compute slices,
memory slices) instead of its memory, resolved on a GPU against the profiles NVML reports.
The two grammars never overlap: a memory-sized name always has a ``<GB>gb`` field.

Pure Python: no NVML, no Ansible imports. Names only describe a profile; which profiles
exist on a GPU, their ids and placements always come from NVML.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

# The suffixes NVML reports (go-nvlib NewMigProfile): media extensions (one set of media
# engines, REV1 profiles), all media engines, no media engines, graphics.
SUFFIXES = ('', '+me', '+me.all', '-me', '+gfx')
_SUFFIX_RE = r'(?P<suffix>\+me\.all|\+me|-me|\+gfx)?'
_PROFILE_RE = re.compile(r'^(?:(?P<c>[0-9]+)c\.)?(?P<g>[0-9]+)g\.(?P<gb>[0-9]+)gb' + _SUFFIX_RE + r'\Z')
_SHAPE_RE = re.compile(r'^(?:(?P<c>[0-9]+)c\.)?(?P<g>[0-9]+)g(?:\.(?P<mem>[0-9]+)mem)?' + _SUFFIX_RE + r'\Z')
_INT64_MAX = 2 ** 63 - 1

# What NVML prefixes every GPU/compute instance profile name with.
_NVML_NAME_PREFIX = 'MIG '


class ProfileError(ValueError):
    """A profile name that does not follow the grammar."""


def _sizes(name, match, fields):
    """The integer fields of a matched name; each must be at least 1 and C at most G."""
    values = {}
    for field in fields:
        text = match.group(field)
        if text is None:
            values[field] = None
            continue
        values[field] = int(text)
        if values[field] < 1:
            raise ProfileError('invalid MIG profile %r: %s%s must be at least 1' % (name, text, field))
    gpu_slices = values['g']
    compute_slices = values['c'] if values['c'] is not None else gpu_slices
    if compute_slices > gpu_slices:
        raise ProfileError('invalid MIG profile %r: %dc is larger than its %dg GPU instance'
                           % (name, compute_slices, gpu_slices))
    return compute_slices, gpu_slices, values


class _Named(object):
    """What memory-sized profiles and shapes share: slices and the suffix."""

    __slots__ = ()

    @property
    def is_compute_instance_profile(self):
        """True for a ``<C>c.`` key smaller than its GPU instance."""
        return self.compute_slices != self.gpu_slices

    @property
    def media_extensions(self):
        """``+me``: the media-extended profile (REV1), one such instance per GPU."""
        return self.suffix == '+me'

    @property
    def all_media_engines(self):
        """``+me.all``: every media engine of the GPU (beside it, only ``-me`` instances fit)."""
        return self.suffix == '+me.all'

    @property
    def no_media_engines(self):
        """``-me``: no media engine at all."""
        return self.suffix == '-me'

    @property
    def graphics(self):
        """``+gfx``: graphics capable."""
        return self.suffix == '+gfx'

    @property
    def name(self):
        if self.is_compute_instance_profile:
            return '%dc.%s' % (self.compute_slices, self.gpu_instance_name)
        return self.gpu_instance_name

    def __eq__(self, other):
        return type(other) is type(self) and self.name == other.name

    def __ne__(self, other):
        return not self.__eq__(other)

    def __hash__(self):
        return hash((type(self).__name__, self.name))

    def __repr__(self):
        return '%s(%r)' % (type(self).__name__, self.name)

    def __str__(self):
        return self.name


class MigProfile(_Named):
    """One memory-sized profile name, as NVML and mig-parted write it.

    ``compute_slices`` is the size of the compute instance (C); for a GPU instance profile or
    a full-size compute instance it equals ``gpu_slices`` (``1c.1g.10gb`` is ``1g.10gb``, as
    in go-nvlib). ``suffix`` is one of :data:`SUFFIXES`.
    """

    __slots__ = ('compute_slices', 'gpu_slices', 'memory_gb', 'suffix')

    def __init__(self, compute_slices, gpu_slices, memory_gb, suffix=''):
        if suffix not in SUFFIXES:
            raise ProfileError('unknown MIG profile suffix %r (known: %s)' % (suffix, ', '.join(s for s in SUFFIXES if s)))
        self.compute_slices = compute_slices
        self.gpu_slices = gpu_slices
        self.memory_gb = memory_gb
        self.suffix = suffix

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
                "invalid MIG profile %r: expected [<C>c.]<G>g.<GB>gb[+me|+me.all|-me|+gfx], e.g. '3g.40gb', "
                "'1c.3g.40gb' or '1g.24gb+gfx'" % (name,))
        compute_slices, gpu_slices, values = _sizes(name, match, ('c', 'g', 'gb'))
        return cls(compute_slices, gpu_slices, values['gb'], match.group('suffix') or '')

    @property
    def gpu_instance_name(self):
        """The GPU instance profile this profile lives in, e.g. ``3g.40gb`` or ``2g.48gb+gfx``."""
        return '%dg.%dgb%s' % (self.gpu_slices, self.memory_gb, self.suffix)


class MigShape(_Named):
    """One model-agnostic instance shape: ``[<C>c.]<G>g[.<M>mem][suffix]``.

    ``memory_slices`` is None when the name leaves it out: the GPU's profile of ``G`` compute
    slices (and that suffix) with the fewest memory slices is meant.
    """

    __slots__ = ('compute_slices', 'gpu_slices', 'memory_slices', 'suffix')

    def __init__(self, compute_slices, gpu_slices, memory_slices=None, suffix=''):
        if suffix not in SUFFIXES:
            raise ProfileError('unknown MIG profile suffix %r (known: %s)' % (suffix, ', '.join(s for s in SUFFIXES if s)))
        self.compute_slices = compute_slices
        self.gpu_slices = gpu_slices
        self.memory_slices = memory_slices
        self.suffix = suffix

    @classmethod
    def parse(cls, name):
        if not isinstance(name, str):
            raise ProfileError('MIG shape must be a string, got %r' % (name,))
        match = _SHAPE_RE.match(name)
        if not match:
            raise ProfileError(
                "invalid model-agnostic MIG shape %r: expected [<C>c.]<G>g[.<M>mem][+me|+me.all|-me|+gfx], "
                "e.g. '1g', '1g.2mem', '1c.3g' or '1g+gfx'" % (name,))
        compute_slices, gpu_slices, values = _sizes(name, match, ('c', 'g', 'mem'))
        return cls(compute_slices, gpu_slices, values['mem'], match.group('suffix') or '')

    @staticmethod
    def looks_like(name):
        """True when ``name`` has the shape syntax (its numbers may still be invalid)."""
        return isinstance(name, str) and bool(_SHAPE_RE.match(name))

    @property
    def gpu_instance_name(self):
        """The GPU instance shape, e.g. ``3g`` for ``1c.3g``."""
        memory = '.%dmem' % self.memory_slices if self.memory_slices is not None else ''
        return '%dg%s%s' % (self.gpu_slices, memory, self.suffix)


def parse_key(name):
    """A ``mig-devices`` key: a :class:`MigShape` when it has the shape syntax, else a :class:`MigProfile`."""
    if MigShape.looks_like(name):
        return MigShape.parse(name)
    return MigProfile.parse(name)


def compute_instance_name(ci_slices, gpu_instance_name):
    """Name of a compute instance of ``ci_slices`` inside ``gpu_instance_name`` (its suffix kept)."""
    gi = MigProfile.parse(gpu_instance_name)
    return MigProfile(ci_slices, gi.gpu_slices, gi.memory_gb, gi.suffix).name


# ---- go-nvlib's format check -------------------------------------------------------------
# mig-parted validates each mig-devices key only with go-nvlib's AssertValidMigProfileFormat
# when it loads a file: a looser grammar (any attribute list, zeros allowed) than the names
# a GPU can report. These functions reproduce that check so a file is refused exactly when
# mig-parted refuses it.

def _go_atoi(text):
    """strconv.Atoi: optional sign, decimal digits, within int64."""
    if not re.match(r'[+-]?[0-9]+\Z', text):
        return None
    value = int(text)
    return value if -_INT64_MAX - 1 <= value <= _INT64_MAX else None


def _format_field(text, unit):
    if text.strip() != text:
        raise ProfileError("leading or trailing spaces on '%%d%s'" % unit)
    if not text.endswith(unit):
        raise ProfileError("missing '%s' from '%%d%s'" % (unit, unit))
    value = _go_atoi(text[:-len(unit)])
    if value is None:
        raise ProfileError("malformed number in '%%d%s'" % unit)
    return value


def _format_attributes(text):
    attributes = text.split(',')
    seen = set()
    for attribute in attributes:
        if attribute in seen:
            raise ProfileError('non unique attribute in list')
        if attribute == '':
            raise ProfileError('empty attribute in list')
        if attribute.strip() != attribute:
            raise ProfileError('leading or trailing spaces in attribute')
        if attribute[0] in '0123456789':
            raise ProfileError('attribute begins with a number')
        if attribute[0] == '.' or attribute[-1] == '.':
            raise ProfileError('attribute begins/ends with a dot')
        if not re.match(r'[A-Za-z0-9.]+\Z', attribute):
            raise ProfileError('non alpha-numeric character or digit in attribute')
        seen.add(attribute)
    return attributes


def check_format(name):
    """go-nvlib's profile format check, as mig-parted applies it to ``mig-devices`` keys.

    Returns (C, G, GB, attributes, negative) and raises :class:`ProfileError` with go-nvlib's
    reason. It accepts names no GPU offers (``0g.0gb``, ``1g.5gb+me,you``): those are refused
    only when a layout is applied (see :meth:`MigProfile.parse`).
    """
    if not isinstance(name, str):
        raise ProfileError('profile %r is not a string' % (name,))
    if name == '':
        raise ProfileError('profile is the empty string')
    positive = name.split('+', 1)
    negative = name.split('-', 1)
    if len(positive) == 2 and len(negative) == 2:
        raise ProfileError("profile '%s' contains both '+/-' attributes" % name)
    parts = positive if len(positive) == 2 else negative
    fields = parts[0].split('.', 2)
    try:
        if len(fields) == 3:
            c, g, gb = _format_field(fields[0], 'c'), _format_field(fields[1], 'g'), _format_field(fields[2], 'gb')
        elif len(fields) == 2:
            g, gb = _format_field(fields[0], 'g'), _format_field(fields[1], 'gb')
            c = g
        else:
            raise ProfileError('parsed wrong number of fields, expected 2 or 3')
    except ProfileError as exc:
        raise ProfileError("cannot parse fields of '%s': %s" % (name, exc))
    if len(parts) == 1:
        return c, g, gb, [], False
    try:
        attributes = _format_attributes(parts[1])
    except ProfileError as exc:
        raise ProfileError("cannot parse attributes of '%s': %s" % (name, exc))
    return c, g, gb, attributes, len(negative) == 2
