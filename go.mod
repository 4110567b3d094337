module github.com/airlockhq/airlock

go 1.26.8
