"""Client quota APIs (DescribeClientQuotas, AlterClientQuotas)."""
