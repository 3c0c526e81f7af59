# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""MIG profile grammar: memory-sized names (mig-parted, go-nvlib), go-nvlib's looser format check, shapes."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.gpufleet.mig.plugins.module_utils.planning._mig_profile import (
    MigProfile,
    MigShape,
    ProfileError,
    check_format,
    compute_instance_name,
    parse_key,
)


# ---- memory-sized names: what a GPU can report ----------------------------------------------

@pytest.mark.parametrize('text, name, gpu_instance, compute, gpu, gb, suffix', [
    ('1g.10gb', '1g.10gb', '1g.10gb', 1, 1, 10, ''),
    ('7g.80gb', '7g.80gb', '7g.80gb', 7, 7, 80, ''),
    ('1c.3g.40gb', '1c.3g.40gb', '3g.40gb', 1, 3, 40, ''),
    ('3c.3g.40gb', '3g.40gb', '3g.40gb', 3, 3, 40, ''),          # full-size CI is the GI's name
    ('1g.10gb+me', '1g.10gb+me', '1g.10gb+me', 1, 1, 10, '+me'),
    ('1g.24gb+me.all', '1g.24gb+me.all', '1g.24gb+me.all', 1, 1, 24, '+me.all'),
    ('2g.48gb-me', '2g.48gb-me', '2g.48gb-me', 2, 2, 48, '-me'),
    ('4g.96gb+gfx', '4g.96gb+gfx', '4g.96gb+gfx', 4, 4, 96, '+gfx'),
    ('1c.2g.48gb+gfx', '1c.2g.48gb+gfx', '2g.48gb+gfx', 1, 2, 48, '+gfx'),
    ('1c.1g.24gb-me', '1g.24gb-me', '1g.24gb-me', 1, 1, 24, '-me'),
    ('MIG 1g.24gb+me.all', '1g.24gb+me.all', '1g.24gb+me.all', 1, 1, 24, '+me.all'),   # NVML's name field
    ('02g.020gb', '2g.20gb', '2g.20gb', 2, 2, 20, ''),             # go-nvlib reads numbers with Atoi
])
def test_memory_sized_names_accepted(text, name, gpu_instance, compute, gpu, gb, suffix):
    parsed = MigProfile.parse(text)
    assert (parsed.name, parsed.gpu_instance_name) == (name, gpu_instance)
    assert (parsed.compute_slices, parsed.gpu_slices, parsed.memory_gb, parsed.suffix) == (compute, gpu, gb, suffix)
    assert parsed.is_compute_instance_profile is (compute != gpu)
    assert str(parsed) == name and MigProfile.parse(name) == parsed


@pytest.mark.parametrize('suffix, media, all_media, no_media, graphics', [
    ('', False, False, False, False),
    ('+me', True, False, False, False),
    ('+me.all', False, True, False, False),
    ('-me', False, False, True, False),
    ('+gfx', False, False, False, True),
])
def test_suffix_attributes_tell_the_variants_apart(suffix, media, all_media, no_media, graphics):
    for text in ('1g.24gb' + suffix, '1c.2g.48gb' + suffix):
        parsed = MigProfile.parse(text)
        assert (parsed.media_extensions, parsed.all_media_engines, parsed.no_media_engines, parsed.graphics) == (
            media, all_media, no_media, graphics), text
    assert len(set(MigProfile.parse('1g.24gb' + s) for s in ('', '+me', '+me.all', '-me', '+gfx'))) == 5


@pytest.mark.parametrize('text, reason', [
    ('0g.0gb', 'must be at least 1'),
    ('1g.0gb', 'must be at least 1'),
    ('0c.1g.10gb', 'must be at least 1'),
    ('2c.1g.10gb', '2c is larger than its 1g GPU instance'),
    ('1g.10gb+foo', 'expected [<C>c.]<G>g.<GB>gb'),             # an attribute NVML never reports
    ('1g.10gb+me,gfx', 'expected'),                             # NVML names carry one attribute at most
    ('1g.10gb+me+me', 'expected'),
    ('1g.10gb-gfx', 'expected'),                                # only the media engines can be negated
    ('1g.10gb-me.all', 'expected'),
    ('1g', 'expected'),
    ('1g.10', 'expected'),
    ('g.10gb', 'expected'),
    ('1c.1g', 'expected'),
    ('1g.10gb +me', 'expected'),
    ('1g.10GB', 'expected'),
    ('threeg', 'expected'),
])
def test_memory_sized_names_rejected(text, reason):
    with pytest.raises(ProfileError) as exc:
        MigProfile.parse(text)
    assert reason in str(exc.value) and repr(text) in str(exc.value)


def test_non_string_and_unknown_suffix_rejected():
    with pytest.raises(ProfileError, match='must be a string'):
        MigProfile.parse(10)
    with pytest.raises(ProfileError, match="unknown MIG profile suffix '\\+foo'"):
        MigProfile(1, 1, 10, '+foo')


def test_compute_instance_name_keeps_the_suffix():
    assert compute_instance_name(1, '3g.40gb') == '1c.3g.40gb'
    assert compute_instance_name(3, '3g.40gb') == '3g.40gb'
    assert compute_instance_name(1, '2g.48gb+gfx') == '1c.2g.48gb+gfx'
    assert compute_instance_name(1, '2g.48gb-me') == '1c.2g.48gb-me'


# ---- go-nvlib's format check: what mig-parted accepts when it loads a file ---------------------

@pytest.mark.parametrize('text, fields', [
    ('1g.5gb', (1, 1, 5, [], False)),
    ('1c.2g.10gb', (1, 2, 10, [], False)),
    ('0g.0gb', (0, 0, 0, [], False)),                               # format only: no GPU has it
    ('9c.1g.5gb', (9, 1, 5, [], False)),
    ('123456c.123456g.9999999gb', (123456, 123456, 9999999, [], False)),
    ('1g.5gb+me', (1, 1, 5, ['me'], False)),
    ('1g.5gb+me.all', (1, 1, 5, ['me.all'], False)),
    ('1g.5gb-me', (1, 1, 5, ['me'], True)),
    ('1c.1g.5gb+gfx', (1, 1, 5, ['gfx'], False)),
    ('1g.5gb+me,gfx,x9', (1, 1, 5, ['me', 'gfx', 'x9'], False)),
    ('1g.5gb+A.b', (1, 1, 5, ['A.b'], False)),
    ('01g.5gb', (1, 1, 5, [], False)),
])
def test_format_check_accepts(text, fields):
    assert check_format(text) == fields


@pytest.mark.parametrize('text, reason', [
    ('', 'empty string'),
    (' 1g.5gb', 'leading or trailing spaces'),
    ('1g.5gb ', 'leading or trailing spaces'),
    ('1g .5gb', 'leading or trailing spaces'),
    ('1c. 1g.5gb', 'leading or trailing spaces'),
    ('1x.1g.5gb', "missing 'c'"),
    ('1c.x1g.5gb', 'malformed number'),
    ('1g.5gbx', "missing 'gb'"),
    ('1g.5', "missing 'gb'"),
    ('g.5gb', 'malformed number'),
    ('1g.gb', 'malformed number'),
    ('1g', 'wrong number of fields'),
    ('1c.1g.5gb.2', "missing 'gb'"),
    ('1g.5gb+', 'empty attribute'),
    ('1g.5gb+me,', 'empty attribute'),
    ('1g.5gb+me,me', 'non unique attribute'),
    ('1g.5gb+ me', 'leading or trailing spaces in attribute'),
    ('1g.5gb+2me', 'begins with a number'),
    ('1g.5gb+.me', 'begins/ends with a dot'),
    ('1g.5gb+me.', 'begins/ends with a dot'),
    ('1g.5gb+m_e', 'non alpha-numeric'),
    ('1g.5gb+me-x', "contains both '+/-'"),
    ('1g.5gb-me+x', "contains both '+/-'"),
    ('1g.5gb*me', "missing 'gb'"),
    ('1g.99999999999999999999gb', 'malformed number'),
    ('bogus', 'wrong number of fields'),
])
def test_format_check_rejects(text, reason):
    with pytest.raises(ProfileError) as exc:
        check_format(text)
    assert reason in str(exc.value)


def test_every_name_a_gpu_reports_passes_the_format_check():
    for text in ('1g.10gb', '1c.3g.40gb', '1g.24gb+me.all', '2g.48gb-me', '4g.96gb+gfx', '7g.141gb'):
        c, g, gb, attributes, negative = check_format(text)
        parsed = MigProfile.parse(text)
        assert (c, g, gb) == (parsed.compute_slices, parsed.gpu_slices, parsed.memory_gb)
        assert ('-' if negative else '+') + ','.join(attributes) == (parsed.suffix or '+')


# ---- model-agnostic shapes ------------------------------------------------------------------

@pytest.mark.parametrize('text, name, gpu_instance, compute, gpu, memory, suffix', [
    ('1g', '1g', '1g', 1, 1, None, ''),
    ('7g', '7g', '7g', 7, 7, None, ''),
    ('1g.2mem', '1g.2mem', '1g.2mem', 1, 1, 2, ''),
    ('1c.3g', '1c.3g', '3g', 1, 3, None, ''),
    ('7c.7g', '7g', '7g', 7, 7, None, ''),
    ('2c.4g.4mem', '2c.4g.4mem', '4g.4mem', 2, 4, 4, ''),
    ('1g+me', '1g+me', '1g+me', 1, 1, None, '+me'),
    ('2g+me.all', '2g+me.all', '2g+me.all', 2, 2, None, '+me.all'),
    ('1g-me', '1g-me', '1g-me', 1, 1, None, '-me'),
    ('1c.2g+gfx', '1c.2g+gfx', '2g+gfx', 1, 2, None, '+gfx'),
])
def test_shapes_accepted(text, name, gpu_instance, compute, gpu, memory, suffix):
    shape = MigShape.parse(text)
    assert (shape.name, shape.gpu_instance_name) == (name, gpu_instance)
    assert (shape.compute_slices, shape.gpu_slices, shape.memory_slices, shape.suffix) == (compute, gpu, memory, suffix)
    assert MigShape.looks_like(text) and parse_key(text) == shape


@pytest.mark.parametrize('text, reason', [
    ('0g', 'must be at least 1'),
    ('1g.0mem', 'must be at least 1'),
    ('2c.1g', '2c is larger than its 1g'),
    ('1g+foo', 'expected [<C>c.]<G>g[.<M>mem]'),
    ('1g.2', 'expected'),
    ('1g.2m', 'expected'),
    ('g', 'expected'),
    ('1g.10gb', 'expected'),                    # a memory-sized name is not a shape
])
def test_shapes_rejected(text, reason):
    with pytest.raises(ProfileError) as exc:
        MigShape.parse(text)
    assert reason in str(exc.value)


@pytest.mark.parametrize('text', ['1g', '1g.2mem', '1c.3g', '7g+gfx', '2g-me', '1g+me.all', '0g', '2c.1g'])
def test_shapes_and_memory_sized_names_never_overlap(text):
    """mig-parted refuses every shape when it loads a file: a shape is never read as a mig-parted name."""
    assert MigShape.looks_like(text)
    with pytest.raises(ProfileError):
        check_format(text)


def test_parse_key_reads_memory_sized_names_as_profiles():
    assert isinstance(parse_key('1g.10gb'), MigProfile)
    assert isinstance(parse_key('1c.1g.2mem'), MigShape)
    assert parse_key('1c.1g.2mem').name == '1g.2mem'
    assert MigShape.parse('1g') != MigProfile.parse('1g.10gb')
    with pytest.raises(ProfileError):
        parse_key('1g.10')
