# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The collection docsite that make docs builds (antsibull-docs + Sphinx, mk/docs.mk), as a browser shows it:
its index lists the modules, filters, roles and guides, and a module page shows the module's own options.

Run after make docs (make browser-test builds it first). Fails, never skips, when the site is not built.
"""

from __future__ import absolute_import, division, print_function

import os

from ansible_collections.gpufleet.mig.tests.browser.cdp import Chromium, ensure_chromium

REPOSITORY = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))
SITE = os.path.join(REPOSITORY, 'build', 'docsite', 'html')

PAGE_TEXT = r'''
(() => ({
  title: document.title,
  heading: (document.querySelector('h1') || {}).textContent || '',
  links: [...document.querySelectorAll('a[href]')].map(a => a.getAttribute('href')),
  text: document.body.innerText,
  options: [...document.querySelectorAll('[id^="parameter-"]')].map(el => el.id),
}))()
'''


def site_page(name):
    path = os.path.join(SITE, name)
    assert os.path.isfile(path), '%s is not built: run make docs' % path
    return 'file://' + path


def test_the_docsite_index_and_a_module_page_render_from_the_collection_docs():
    binary, dummy = ensure_chromium()
    with Chromium(binary) as browser:
        session, requests = browser.open_page(site_page('index.html'))
        index = browser.evaluate(session, PAGE_TEXT)
        module_session, module_requests = browser.open_page(site_page('nvidia_mig_layout_module.html'))
        module = browser.evaluate(module_session, PAGE_TEXT)

    # Everything the pages load is in the built site: a docsite read offline works.
    assert [url for url in requests + module_requests if not url.startswith(('file://', 'data:'))] == []

    assert 'gpufleet.mig' in index['heading'].lower()  # antsibull-docs titles it Gpufleet.Mig
    for page in ('nvidia_mig_layout_module.html', 'nvidia_mig_facts_module.html', 'mig_layout_role.html',
                 'mig_demand_plan_filter.html', 'docsite/event_source.html', 'docsite/guide_start.html', 'docsite/guide_advisor.html'):
        assert page in index['links'], '%s not linked from the index' % page

    assert 'gpufleet.mig.nvidia_mig_layout' in module['heading']
    # The options come from the module's DOCUMENTATION: the layout's name and the in-place switch's evict.
    assert 'parameter-name' in module['options'] and 'parameter-evict' in module['options'], module['options']
    assert 'Synopsis' in module['text'] and 'Return Values' in module['text']
