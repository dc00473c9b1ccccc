-- The analysis queue: workers select runnable jobs by (state, run_after);
-- only queued and running jobs are in the index, so done ones cost nothing.
CREATE INDEX analysis_jobs_runnable ON analysis_jobs (run_after, job_id)
    WHERE state IN ('queued', 'running');
