"""The project's data files, installed with it as the package `logbroker_include` (setup.py).

    schemas/         Avro schemas: the demo's events (page_views, searches, ad_clicks),
                     EventHeader, AuditCount                                      installed
    expectations/    the audit's Great Expectations suites                        installed
    report_assets/   the CSS and JS the audit's reports load, vendored (SOURCES.md) installed
    report_templates/  the Jinja2 templates of the audit's report pages           installed
    config/          sample server.properties, the mirror's consumer and producer configs
    pipeline/        pipeline.json: the pipeline the DAGs run from a checkout
                     (LOGBROKER_PIPELINE names a deployment's own; README.md: which
                     pipeline file runs where)
    compose/         docker-compose.yaml's configs, its own pipeline.json among them

A checkout's editable install (`make setup`) maps the package to this folder, and a wheel
carries a copy of the installed parts, so code finds them the same way in both, from any
working directory: `logbroker.include_files.include_path("expectations")`. The rest is a
checkout's or a deployment's own, not installed. No code here: this file makes the folder a
package.
"""
