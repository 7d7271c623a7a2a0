select c_name, p_name, ps_availqty, s_name, o_custkey, r_name, n_name,
       sum(l_extendedprice * (1 - l_discount))
from orders, lineitem, customer, part, partsupp, supplier, nation, region
where o_orderkey = l_orderkey and c_custkey = o_custkey and p_partkey = l_partkey
  and ps_partkey = p_partkey and s_suppkey = ps_suppkey and r_regionkey = n_regionkey
  and s_nationkey = n_nationkey
group by c_name, p_name, ps_availqty, s_name, o_custkey, r_name, n_name
