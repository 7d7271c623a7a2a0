select n_name as nation, year(o_orderdate) as o_year,
       sum(l_extendedprice * (1 - l_discount) - ps_supplycost * l_quantity) as sum_profit
from part, supplier, lineitem, partsupp, orders, nation
where s_suppkey = l_suppkey and ps_suppkey = l_suppkey and ps_partkey = l_partkey and p_partkey = l_partkey
  and o_orderkey = l_orderkey and s_nationkey = n_nationkey and p_name like '%green%'
group by n_name, year(o_orderdate)
order by nation, o_year desc
