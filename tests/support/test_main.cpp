#define BOOST_TEST_MODULE tinfer
#include <boost/test/unit_test.hpp>
