"""Airflow hooks, operators, sensors and triggers over the logbroker library.

    logbroker_hook.LogbrokerHook          conn type `logbroker`: a cluster (ZooKeeper connect
                                          string with chroot) and its schema registry
    spark_submit.SparkAppOperator         the Spark provider's SparkSubmitOperator (conn type
                                          `spark`) with what our apps need, and a kill that
                                          leaves no process behind
    operators                             MirrorOperator, HourlyLoadOperator (one topic's hour)
    triggers, sensors                     MirrorCaughtUpTrigger, MirrorCaughtUpSensor (deferrable)
    provider_info                         registers the connection types and their form fields

Airflow finds these files through `plugins/`; `pip install -e .` makes `hooks` importable
everywhere else. Nothing here is imported by the library (docs/design.md §2: library <- hooks <- dags).
"""
