# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Sphinx settings of the collection docsite (make docs, mk/docs.mk): antsibull-docs' own set-up
(antsibull-docs sphinx-init) without intersphinx, which would fetch inventories from the network."""

project = 'gpufleet.mig'
copyright = 'gpufleet.mig contributors'
title = 'gpufleet.mig'
html_short_title = 'gpufleet.mig'

extensions = ['sphinx_antsibull_ext']
# Files the extra docs include (the event source's source, copied there by make docs), not pages of their own.
exclude_patterns = ['_include']

pygments_style = 'ansible'
highlight_language = 'YAML+Jinja'
html_theme = 'sphinx_ansible_theme'
html_show_sphinx = False
html_use_smartypants = True
html_use_modindex = False
html_use_index = False
html_copy_source = False
default_role = 'any'
nitpicky = True

# Labels of the Ansible docsite and of other collections' docs (kubernetes.core, awx.awx) that the plugin docs
# reference: intersphinx would resolve them from docs.ansible.com; offline they link there by their known paths.
ANSIBLE_DOCS = 'https://docs.ansible.com/ansible/latest/'
ANSIBLE_LABELS = {
    'common_return_values': 'reference_appendices/common_return_values.html',
    'ansible_configuration_settings': 'reference_appendices/config.html',
}


def _external_label(app, env, node, contnode):
    from docutils import nodes

    target = node.get('reftarget', '')
    if node.get('refdomain') != 'std' or node.get('reftype') != 'ref':
        return None
    if target in ANSIBLE_LABELS:
        uri = ANSIBLE_DOCS + ANSIBLE_LABELS[target]
    elif target.startswith('ansible_collections.') and not target.startswith('ansible_collections.gpufleet.mig.'):
        parts = target.split('.')
        if len(parts) < 4 or '__' in parts[3]:
            return None
        uri = ANSIBLE_DOCS + 'collections/%s/%s/%s.html' % (parts[1], parts[2], parts[3])
    else:
        return None
    reference = nodes.reference('', '', internal=False, refuri=uri)
    reference += contnode
    return reference


def setup(app):
    app.connect('missing-reference', _external_label)
