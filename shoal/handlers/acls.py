"""ACL APIs (CreateAcls, DescribeAcls, DeleteAcls)."""
