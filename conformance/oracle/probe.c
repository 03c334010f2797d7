/* build.rs preprocesses this file to learn whether <infiniband/mlx5dv.h> is installed. */
#include <infiniband/mlx5dv.h>
