"""Pipeline parallelism: schedules (plain functions shared by numeric training and the cost model)."""
